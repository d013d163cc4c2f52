package engine

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble"
	"github.com/counterd/counterd/internal/contract"
)

// Metadata records: small named values that are not counters (the
// rate-limit policies), stored in Pebble under 'm' + key beside the
// counters. Writes are synced; the engine neither replicates nor expires
// them, and FlushAll leaves them.
const prefixMeta byte = 'm'

func metaKey(key string) []byte { return append([]byte{prefixMeta}, key...) }

// PutMeta writes every record of kv in one synced batch (all or none); a
// nil value deletes the key. Safe for concurrent use.
func (e *Engine) PutMeta(kv map[string][]byte) error {
	if err := e.checkWrite(); err != nil {
		return err
	}
	b := e.db.NewBatch()
	defer b.Close()
	for k, v := range kv {
		if k == "" {
			return fmt.Errorf("%w: empty metadata key", contract.ErrInvalidArgument)
		}
		var err error
		if v == nil {
			err = b.Delete(metaKey(k), nil)
		} else {
			err = b.Set(metaKey(k), v, nil)
		}
		if err != nil {
			return fmt.Errorf("engine: metadata batch: %w", err)
		}
	}
	if err := e.commitGuarded(func() error { return b.Commit(pebble.Sync) }); err != nil {
		return fmt.Errorf("engine: store metadata: %w", err)
	}
	return nil
}

// Meta returns every record whose key starts with prefix. Safe for
// concurrent use.
func (e *Engine) Meta(prefix string) (map[string][]byte, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	lo := metaKey(prefix)
	hi := []byte{prefixMeta + 1}
	if prefix != "" {
		hi = prefixEnd(lo)
	}
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, fmt.Errorf("engine: read metadata: %w", err)
	}
	defer it.Close()
	out := map[string][]byte{}
	for it.First(); it.Valid(); it.Next() {
		k := strings.Clone(string(it.Key()[1:]))
		out[k] = append([]byte(nil), it.Value()...)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("engine: read metadata: %w", err)
	}
	return out, nil
}

// prefixEnd is the smallest key above every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
