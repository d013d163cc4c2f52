package resp

// Hash commands: HINCRBY, HINCRBYFLOAT, HDEL and the hash reads. A field
// holds an int64 or a float's text (counter.Field); reads answer either as
// Redis does, the text.

import (
	"errors"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
)

// HINCRBY key field increment
func prepHIncrBy(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	d, ok := parseInt(args[3])
	if !ok {
		return ops, errNotInteger, true
	}
	// Neither the name nor the one-field slice is copied: the engine
	// reads them during the call, and the hash copies a name it keeps.
	c.field[0] = counter.FieldDelta{Name: str(args[2]), Delta: d}
	return append(ops, contract.Op{Type: contract.OpHAdd, ID: str(args[1]), Fields: c.field[:]}), "", true
}

// HINCRBYFLOAT key field increment: the increment is parsed first, as
// Redis does (before the key's type); the text travels to the engine.
func prepHIncrByFloat(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	d, err := counter.ParseFloat(str(args[3]))
	if err != nil {
		return ops, errNotFloat, true
	}
	if d.IsInf() {
		return ops, "ERR value is NaN or Infinity", true
	}
	c.field[0] = counter.FieldDelta{Name: str(args[2]), Float: str(args[3])}
	return append(ops, contract.Op{Type: contract.OpHAdd, ID: str(args[1]), Fields: c.field[:]}), "", true
}

func doneHIncrByFloat(c *client, args [][]byte, res []contract.Result) {
	if len(res[0].Fields) == 0 {
		c.writeError("ERR internal error: no field in result")
		return
	}
	c.writeBulkString(res[0].Fields[0].Text())
}

// writeField writes a field's value as a bulk string.
func writeField(c *client, f *counter.Field) {
	if f.Float != "" {
		c.writeBulkString(f.Float)
		return
	}
	c.writeBulkInt(f.Value)
}

func doneHIncrBy(c *client, args [][]byte, res []contract.Result) {
	if len(res[0].Fields) == 0 {
		c.writeError("ERR internal error: no field in result")
		return
	}
	c.writeInt(res[0].Fields[0].Value)
}

// HDEL key field [field ...], split in ops of at most contract.MaxItems
// fields (applied atomically together).
func prepHDel(c *client, args [][]byte, ops []contract.Op) ([]contract.Op, string, bool) {
	id := str(args[1])
	names := args[2:]
	for len(names) > 0 {
		n := min(len(names), contract.MaxItems)
		ss := make([]string, n)
		for i := range ss {
			ss[i] = str(names[i])
		}
		ops = append(ops, contract.Op{Type: contract.OpHDel, ID: id, Names: ss})
		names = names[n:]
	}
	return ops, "", true
}

func doneSumValue(c *client, args [][]byte, res []contract.Result) {
	var n int64
	for i := range res {
		n += res[i].Value
	}
	c.writeInt(n)
}

// hashView reads a hash; ok is false after a reply was written (error).
// A missing key reads as an empty hash.
func hashView(s *Server, c *client, key []byte) ([]counter.Field, bool) {
	v, err := s.eng.Get(c.ctx, str(key))
	if err != nil {
		c.writeError(engineError(err))
		return nil, false
	}
	c.lookedUp(v.Exists)
	if !v.Exists {
		return nil, true
	}
	if v.Kind != contract.KindHash {
		c.writeError(errWrongType)
		return nil, false
	}
	return v.Fields, true
}

// HGET key field. The engine's HGet answers integer fields; a float one
// is read from the whole hash.
func cmdHGet(s *Server, c *client, args [][]byte) {
	v, ok, err := s.eng.HGet(c.ctx, str(args[1]), str(args[2]))
	if err == nil {
		c.lookedUp(ok)
	}
	switch {
	case ok && errors.Is(err, contract.ErrNotInteger):
		fields, ok := hashView(s, c, args[1])
		if !ok {
			return
		}
		if f, ok := findField(fields, args[2]); ok {
			writeField(c, &f)
		} else { // deleted in between
			c.writeNull()
		}
	case err != nil:
		c.writeError(engineError(err))
	case !ok:
		c.writeNull()
	default:
		c.writeBulkInt(v)
	}
}

// HEXISTS key field
func cmdHExists(s *Server, c *client, args [][]byte) {
	_, ok, err := s.eng.HGet(c.ctx, str(args[1]), str(args[2]))
	switch {
	case err != nil && !(ok && errors.Is(err, contract.ErrNotInteger)): // a float field exists
		c.writeError(engineError(err))
	case ok:
		c.writeInt(1)
	default:
		c.writeInt(0)
	}
}

// findField finds name in fields, which the engine sorts by name.
func findField(fields []counter.Field, name []byte) (counter.Field, bool) {
	lo, hi := 0, len(fields)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if fields[m].Name < str(name) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(fields) && fields[lo].Name == str(name) {
		return fields[lo], true
	}
	return counter.Field{}, false
}

// HMGET key field [field ...]
func cmdHMGet(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeArray(len(args) - 2)
	for _, f := range args[2:] {
		if v, ok := findField(fields, f); ok {
			writeField(c, &v)
		} else {
			c.writeNull()
		}
	}
}

// HGETALL key: a map in RESP3, a flat array in RESP2.
func cmdHGetAll(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeMap(len(fields))
	for i := range fields {
		c.writeBulkString(fields[i].Name)
		writeField(c, &fields[i])
	}
}

// HKEYS key
func cmdHKeys(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeArray(len(fields))
	for _, f := range fields {
		c.writeBulkString(f.Name)
	}
}

// HVALS key
func cmdHVals(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeArray(len(fields))
	for i := range fields {
		writeField(c, &fields[i])
	}
}

// HLEN key
func cmdHLen(s *Server, c *client, args [][]byte) {
	fields, ok := hashView(s, c, args[1])
	if !ok {
		return
	}
	c.writeInt(int64(len(fields)))
}
