// Package quota bounds what clients can make a node hold, per namespace:
// the number of keys (counters) under a quota and the fields of one hash.
//
// A quotas file (Parse) lists quotas by Redis glob over ids, like the
// grants of a tokens file, and a default:
//
//	namespaces:
//	  "q:*":
//	    max_keys: 10
//	    max_hash_fields: 1000
//	default: {max_keys: 10000000, max_hash_fields: 100000}
//
// An id falls under the first quota of the file, in file order, whose
// pattern matches it (the first match wins, like a firewall's rules); an
// id that matches none falls under the default, which is counted for each
// namespace apart: the part of the id before its first ':' (DESIGN.md §2),
// and one namespace, "", for every id without a ':'. Without a default,
// such ids have no bound. A limit left out of a quota is not bounded.
//
// A Set is a Config with one key counter per quota (and per namespace of
// the default). Backends keep the counters exact where their state lives
// (internal/engine under the key's lock); Counter.Reserve is the bounded
// increment every key creation goes through, so that concurrent creations
// never pass a limit. Increments of existing keys never touch a Set.
package quota
