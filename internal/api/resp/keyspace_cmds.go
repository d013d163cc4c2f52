package resp

import (
	"errors"
	"math"
	"math/rand/v2"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/glob"
)

// RENAME, RENAMENX, COPY, RANDOMKEY and HRANDFIELD (issue 28).
//
// RENAME and COPY read the source (every kind: its value, fields,
// registers, shards or window buckets, and its expiry) and write the
// destination as one engine batch (ApplyBatch, what MULTI/EXEC applies):
// delete the destination, create it from the source's state, give it the
// source's expiry, and for RENAME delete the source. They run under the
// exclusive side of the script gate (like GETDEL and MSETNX), so no other
// Redis-protocol client's command runs between the read and the batch.
// In a cluster both keys must have one owner (Redis Cluster's CROSSSLOT
// otherwise), as a script's keys must.

func keyspaceCommands() []*command {
	const (
		w = flagWrite
		r = flagReadonly
		f = flagFast
	)
	return []*command{
		{name: "rename", arity: 3, flags: w, first: 1, last: 2, step: 1,
			doc: &cmdDoc{"generic", "Renames a key and overwrites the destination.", "1.0.0", "O(1)", []argDoc{aKey("key"), aKey("newkey")}},
			fn:  renameCmd(false)},
		{name: "renamenx", arity: 3, flags: w | f, first: 1, last: 2, step: 1,
			doc: &cmdDoc{"generic", "Renames a key only when the target key name doesn't exist.", "1.0.0", "O(1)", []argDoc{aKey("key"), aKey("newkey")}},
			fn:  renameCmd(true)},
		{name: "copy", arity: -3, flags: w, first: 1, last: 2, step: 1,
			doc: &cmdDoc{"generic", "Copies the value of a key to a new key.", "6.2.0", "O(N) worst case for collections, where N is the number of nested items. O(1) for string values.", []argDoc{
				aKey("source"), aKey("destination"), aOpt(aTokInt("DB", "destination-db")), aOpt(aTok("REPLACE"))}},
			fn: cmdCopy},
		{name: "randomkey", arity: 1, flags: r,
			doc: &cmdDoc{"generic", "Returns a random key name from the database.", "1.0.0", "O(1)", nil},
			fn:  cmdRandomKey},
		{name: "hscan", arity: -3, flags: r, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Iterates over fields and values of a hash.", "2.8.0", "O(1) for every call. O(N) for a complete iteration.", []argDoc{
				aKey("key"), aInt("cursor"), aOpt(argDoc{name: "pattern", typ: "pattern", token: "MATCH"}), aOpt(aTokInt("COUNT", "count"))}},
			fn: cmdHScan},
		{name: "hrandfield", arity: -2, flags: r, first: 1, last: 1, step: 1,
			doc: &cmdDoc{"hash", "Returns one or more random fields from a hash.", "6.2.0", "O(N) where N is the number of fields returned", []argDoc{
				aKey("key"), aOpt(aBlock("options", aInt("count"), aOpt(aTok("WITHVALUES"))))}},
			fn: cmdHRandField},
	}
}

// sameOwner reports whether a and b have one owner (always outside a
// cluster); false has answered CROSSSLOT.
func (s *Server) sameOwner(c *client, a, b []byte) bool {
	if s.opts.KeyOwner == nil || ownerOf(s.opts.KeyOwner, str(a)) == ownerOf(s.opts.KeyOwner, str(b)) {
		return true
	}
	c.writeError(errCrossSlot)
	return false
}

// RENAME key newkey / RENAMENX key newkey.
func renameCmd(nx bool) func(s *Server, c *client, args [][]byte) {
	return func(s *Server, c *client, args [][]byte) {
		if !s.sameOwner(c, args[1], args[2]) {
			return
		}
		src, dst := str(args[1]), str(args[2])
		v, err := s.eng.Get(c.ctx, src)
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		if !v.Exists {
			c.writeError("ERR no such key")
			return
		}
		if src == dst {
			if nx {
				c.writeInt(0)
			} else {
				c.writeOK()
			}
			return
		}
		if nx && dstTaken(s, c, dst) {
			return
		}
		ops, err := copyOps(&v, src, dst)
		if err == nil {
			ops = append(ops, contract.Op{Type: contract.OpDelete, ID: src})
			_, err = s.eng.ApplyBatch(c.ctx, ops, contract.WriteOptions{})
		}
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		if nx {
			c.writeInt(1)
		} else {
			c.writeOK()
		}
	}
}

// COPY source destination [DB destination-db] [REPLACE]. counterd has
// database 0 only: another DB is "ERR DB index is out of range", Redis's
// answer for a database it does not have.
func cmdCopy(s *Server, c *client, args [][]byte) {
	replace := false
	for i := 3; i < len(args); i++ {
		switch a := args[i]; {
		case eqFold(a, "replace"):
			replace = true
		case eqFold(a, "db") && i+1 < len(args):
			n, ok := parseInt(args[i+1])
			if !ok {
				c.writeError(errNotInteger)
				return
			}
			if n != 0 {
				c.writeError("ERR DB index is out of range")
				return
			}
			i++
		default:
			c.writeError(errSyntax)
			return
		}
	}
	if !s.sameOwner(c, args[1], args[2]) {
		return
	}
	src, dst := str(args[1]), str(args[2])
	if src == dst {
		c.writeError("ERR source and destination objects are the same")
		return
	}
	v, err := s.eng.Get(c.ctx, src)
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	if !v.Exists {
		c.writeInt(0)
		return
	}
	if !replace && dstTaken(s, c, dst) {
		return
	}
	ops, err := copyOps(&v, src, dst)
	if err == nil {
		_, err = s.eng.ApplyBatch(c.ctx, ops, contract.WriteOptions{})
	}
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	c.writeInt(1)
}

// errCopyKind: a kind copyOps does not know (none today).
var errCopyKind = errors.New("cannot copy a counter of this kind")

// copyOps returns the ops that replace dst with a copy of the counter v
// (which exists): delete dst, create it with v's state, and give it v's
// expiry.
//
//   - counter, float: a set of the value (its text for a float);
//   - hash: every field set (integers and floats);
//   - hll: a PFMERGE of the source into the emptied destination at the
//     source's precision (the registers, not an estimate);
//   - sharded, pn: an add of the value to a new counter of that kind (the
//     value, not its distribution over shards or replicas);
//   - window: each bucket inside the window added at its start time, with
//     the source's window spec.
func copyOps(v *contract.View, src, dst string) ([]contract.Op, error) {
	ops := []contract.Op{{Type: contract.OpDelete, ID: dst}}
	switch v.Kind {
	case contract.KindCounter:
		ops = append(ops, contract.Op{Type: contract.OpSet, ID: dst, Value: v.Value})
	case contract.KindFloat:
		ops = append(ops, contract.Op{Type: contract.OpSet, ID: dst, Float: v.Float})
	case contract.KindHash:
		fs := make([]counter.FieldDelta, len(v.Fields))
		for i, f := range v.Fields {
			fs[i] = counter.FieldDelta{Name: f.Name, Delta: f.Value, Float: f.Float}
		}
		if len(fs) > 0 {
			ops = append(ops, contract.Op{Type: contract.OpHSet, ID: dst, Fields: fs})
		}
	case contract.KindHLL:
		ops = append(ops, contract.Op{Type: contract.OpPFMerge, ID: dst, Sources: []string{src}, HLLPrecision: v.Precision})
	case contract.KindSharded:
		ops = append(ops, contract.Op{Type: contract.OpAdd, ID: dst, Kind: contract.KindSharded, Delta: v.Value, Shards: len(v.Shards)})
	case contract.KindPN:
		ops = append(ops, contract.Op{Type: contract.OpAdd, ID: dst, Kind: contract.KindPN, Delta: v.Value})
	case contract.KindWindow:
		if len(v.Buckets) == 0 {
			ops = append(ops, contract.Op{Type: contract.OpAdd, ID: dst, Kind: contract.KindWindow, Window: v.Window})
		}
		for _, b := range v.Buckets {
			ops = append(ops, contract.Op{Type: contract.OpAdd, ID: dst, Kind: contract.KindWindow, Window: v.Window, Delta: b.Count, At: b.Start.UnixNano()})
		}
	default:
		return nil, errCopyKind
	}
	if !v.ExpiresAt.IsZero() {
		ops = append(ops, contract.Op{Type: contract.OpExpire, ID: dst, ExpireAt: v.ExpiresAt.UnixNano()})
	}
	return ops, nil
}

// randomKeySample bounds the keys RANDOMKEY visits: it picks uniformly
// among the first randomKeySample keys of a scan (all of them in a
// smaller keyspace). The embedded engine's scan order follows its shard
// hash, not the ids' order.
const randomKeySample = 10000

// RANDOMKEY: a key picked at random, or nil when there is none.
func cmdRandomKey(s *Server, c *client, args [][]byte) {
	var pick string
	seen := 0
	cursor := uint64(0)
	for {
		ids, next, err := s.eng.Scan(c.ctx, cursor, "", 1000)
		if err != nil {
			c.writeError(engineError(err))
			return
		}
		for _, id := range ids { // reservoir sampling
			seen++
			if rand.IntN(seen) == 0 {
				pick = id
			}
		}
		if next == 0 || seen >= randomKeySample {
			break
		}
		cursor = next
	}
	if seen == 0 {
		c.writeNull()
		return
	}
	c.writeBulkString(pick)
}

// maxRandFields bounds the fields of one HRANDFIELD with a negative
// count (Redis would try to answer up to 2^62 of them).
const maxRandFields = 1 << 20

// HRANDFIELD key [count [WITHVALUES]]
func cmdHRandField(s *Server, c *client, args [][]byte) {
	count, withValues, hasCount := int64(0), false, len(args) >= 3
	if hasCount {
		n, ok := parseInt(args[2])
		if !ok {
			c.writeError(errNotInteger)
			return
		}
		if n == math.MinInt64 {
			c.writeError("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
			return
		}
		if len(args) > 4 || len(args) == 4 && !eqFold(args[3], "withvalues") {
			c.writeError(errSyntax)
			return
		}
		withValues = len(args) == 4
		if withValues && (n < -math.MaxInt64/2 || n > math.MaxInt64/2) {
			c.writeError("ERR value is out of range")
			return
		}
		count = n
	}
	v, err := s.eng.Get(c.ctx, str(args[1]))
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	c.lookedUp(v.Exists)
	if v.Exists && v.Kind != contract.KindHash {
		c.writeError(errWrongType)
		return
	}
	fields := v.Fields
	if !hasCount {
		if len(fields) == 0 {
			c.writeNull()
			return
		}
		c.writeBulkString(fields[rand.IntN(len(fields))].Name)
		return
	}
	if count == 0 || len(fields) == 0 {
		c.writeArray(0)
		return
	}
	var picked []counter.Field
	switch {
	case count < 0: // with repetitions
		if -count > maxRandFields {
			c.writeError("ERR value is out of range")
			return
		}
		picked = make([]counter.Field, -count)
		for i := range picked {
			picked[i] = fields[rand.IntN(len(fields))]
		}
	case count >= int64(len(fields)): // the whole hash
		picked = fields
	default: // count distinct fields in random order
		idx := rand.Perm(len(fields))[:count]
		picked = make([]counter.Field, count)
		for i, j := range idx {
			picked[i] = fields[j]
		}
	}
	if !withValues {
		c.writeArray(len(picked))
		for i := range picked {
			c.writeBulkString(picked[i].Name)
		}
		return
	}
	if c.proto == 3 {
		c.writeArray(len(picked))
		for i := range picked {
			c.writeArray(2)
			c.writeBulkString(picked[i].Name)
			writeField(c, &picked[i])
		}
		return
	}
	c.writeArray(2 * len(picked))
	for i := range picked {
		c.writeBulkString(picked[i].Name)
		writeField(c, &picked[i])
	}
}

// HSCAN key cursor [MATCH pattern] [COUNT count]: every field (matching
// the pattern) and its value in one reply with cursor 0, as Redis answers
// for a hash in its compact encoding; COUNT is a hint, as in Redis. The
// checks come in Redis's order: the cursor, then the key (missing: an
// empty scan, whatever the options), then the options.
func cmdHScan(s *Server, c *client, args [][]byte) {
	// Redis reads the cursor with strtoul: a sign is taken (-1 is the
	// largest cursor), "" is 0; HSCAN of a compact hash ignores its value.
	cur := args[2]
	if len(cur) > 1 && (cur[0] == '-' || cur[0] == '+') {
		cur = cur[1:]
	}
	if _, ok := parseUint(cur); !ok && len(cur) > 0 {
		c.writeError(errInvalidCur)
		return
	}
	v, err := s.eng.Get(c.ctx, str(args[1]))
	if err != nil {
		c.writeError(engineError(err))
		return
	}
	c.lookedUp(v.Exists)
	if v.Exists && v.Kind != contract.KindHash {
		c.writeError(errWrongType)
		return
	}
	if !v.Exists {
		c.writeArray(2)
		c.writeBulkString("0")
		c.writeArray(0)
		return
	}
	match, _, _, ok := scanOptions(c, args[3:], false)
	if !ok {
		return
	}
	fields := v.Fields
	if match != "" {
		kept := make([]counter.Field, 0, len(fields))
		for _, f := range fields {
			if glob.Match(match, f.Name) {
				kept = append(kept, f)
			}
		}
		fields = kept
	}
	c.writeArray(2)
	c.writeBulkString("0")
	c.writeArray(2 * len(fields))
	for i := range fields {
		c.writeBulkString(fields[i].Name)
		writeField(c, &fields[i])
	}
}

// dstTaken reports whether RENAMENX's or COPY's destination exists (or its
// lookup failed), having answered 0 (or the error) if so.
func dstTaken(s *Server, c *client, dst string) bool {
	_, _, exists, err := s.eng.TTL(c.ctx, dst)
	switch {
	case err != nil:
		c.writeError(engineError(err))
	case exists:
		c.writeInt(0)
	}
	return err != nil || exists
}
