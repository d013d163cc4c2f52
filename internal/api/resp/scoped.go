package resp

import (
	"context"
	"strconv"
	"strings"

	"github.com/counterd/counterd/internal/auth"
)

// ScopedGetCommandName is the RESP command of scoped reads (multi-region,
// docs/operations.md "Regions").
const ScopedGetCommandName = "counterd.get"

// RegionValue is one region's part of a global read.
type RegionValue struct {
	Region string
	Value  string // as GET would answer it ("0" when the region has none)
	AsOfMS int64  // unix ms of the region's as-of; 0: nothing received yet
}

// GlobalReader reads id in every region: the combined value as GET would
// answer it (exists false: no region has it) and each region's part.
type GlobalReader func(ctx context.Context, id string) (value string, exists bool, regions []RegionValue, err error)

// COUNTERD.GET key [SCOPE local|region|global]: without SCOPE, or with
// local or region, it answers as GET (this region's value). With global it
// answers an array: the combined value (null when no region has the
// counter), then per region its name, its value and the unix ms of its
// as-of (null before anything was received from it).
func scopedGetCommand(global GlobalReader) *command {
	return &command{
		name: ScopedGetCommandName, arity: -2, flags: flagReadonly, first: 1, last: 1, step: 1,
		doc: &cmdDoc{"counterd", "Returns a counter's value in this region, or combined over every region with SCOPE global (with each region's value and as-of).", "0.1.0", "O(regions)",
			[]argDoc{aKey("key"), aOpt(argDoc{name: "scope", typ: "oneof", token: "SCOPE", args: []argDoc{aTok("LOCAL"), aTok("REGION"), aTok("GLOBAL")}})}},
		fn: func(s *Server, c *client, args [][]byte) {
			scope := "local"
			switch {
			case len(args) == 4 && strings.EqualFold(string(args[2]), "scope"):
				scope = strings.ToLower(string(args[3]))
			case len(args) != 2:
				c.writeError("ERR syntax error")
				return
			}
			switch scope {
			case "local", "region":
				cmdGet(s, c, args[:2])
				return
			case "global":
			default:
				c.writeError("ERR SCOPE must be local, region or global")
				return
			}
			if global == nil {
				c.writeError("ERR SCOPE global needs --peer-regions (this node knows no other region)")
				return
			}
			v, exists, regions, err := global(c.authContext(s.ctx), str(args[1]))
			if err != nil {
				c.writeError(engineError(err))
				return
			}
			c.writeArray(1 + 3*len(regions))
			if exists {
				c.writeBulkString(v)
			} else {
				c.writeNull()
			}
			for _, r := range regions {
				c.writeBulkString(r.Region)
				c.writeBulkString(r.Value)
				if r.AsOfMS == 0 {
					c.writeNull()
				} else {
					c.writeBulkString(strconv.FormatInt(r.AsOfMS, 10))
				}
			}
		},
	}
}

// A scoped read reads its key: read permission on its namespace.
var needReadKey = access{need: auth.Need{Perm: auth.Read}}
