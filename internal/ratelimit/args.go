package ratelimit

import (
	"context"
	"strings"
	"time"
	"unsafe"
)

// CheckArgs runs the RESP command RL.CHECK; args are its arguments without
// the command name:
//
//	RL.CHECK key
//	RL.CHECK key limit period_ms [cost [algorithm [burst]]]
//
// The first form checks key against the policies that match it (each
// policy's cost); the second against one limit (cost default 1,
// algorithm default sliding_window). The reply is the array
//
//	allowed (1 or 0), remaining, reset_ms, retry_after_ms
//
// (milliseconds rounded up). It does not allocate; args are not kept.
// Errors wrap the package's sentinels (an *ArgError for a malformed
// argument); the RESP front end formats them as Redis error replies.
func (l *Limiter) CheckArgs(args [][]byte) ([4]int64, error) {
	a, err := parseArgs(args)
	if err != nil {
		return [4]int64{}, err
	}
	var s Status
	if a.policies {
		s, err = l.CheckPolicies(a.key, nil, PolicyCost, nil)
	} else {
		s, err = l.Check(a.key, a.lim, a.cost)
	}
	if err != nil {
		return [4]int64{}, err
	}
	return argsReply(s), nil
}

// CheckArgsWith runs RL.CHECK (see Limiter.CheckArgs) through c: the
// policies are c.Local()'s, the check is c.CheckMultiContext's. Checkers
// that decide elsewhere (a Router, the Redis decider) implement CheckArgs
// with it.
func CheckArgsWith(c Checker, args [][]byte) ([4]int64, error) {
	return CheckArgsWithContext(context.Background(), c, args)
}

// CheckArgsWithContext is CheckArgsWith with the caller's context (its
// deadline, and the credentials of a check forwarded to another node).
func CheckArgsWithContext(ctx context.Context, c Checker, args [][]byte) ([4]int64, error) {
	var buf [8]Hit
	hits, err := c.Local().appendArgsHits(buf[:0], args)
	if err != nil {
		return [4]int64{}, err
	}
	s, err := c.CheckMultiContext(ctx, hits, nil)
	if err != nil {
		return [4]int64{}, err
	}
	return argsReply(s), nil
}

// appendArgsHits appends the hits RL.CHECK's args check to dst: the one
// limit given, or the policies matching the key (l's). Their keys alias
// args.
func (l *Limiter) appendArgsHits(dst []Hit, args [][]byte) ([]Hit, error) {
	a, err := parseArgs(args)
	if err != nil {
		return nil, err
	}
	if a.policies {
		return l.AppendPolicyHits(dst, a.key, nil, PolicyCost)
	}
	return append(dst, Hit{Key: a.key, Limit: a.lim, Cost: a.cost}), nil
}

// rlArgs are the parsed arguments of RL.CHECK.
type rlArgs struct {
	key      string // aliases the argument: hash it, never keep it
	policies bool   // the one-argument form: the policies matching key
	lim      Limit
	cost     int64
}

// parseArgs parses the arguments of RL.CHECK without allocating.
func parseArgs(args [][]byte) (rlArgs, error) {
	if len(args) != 1 && (len(args) < 3 || len(args) > 6) {
		return rlArgs{}, &ArgError{"wrong number of arguments for 'rl.check' command"}
	}
	a := rlArgs{key: unsafe.String(unsafe.SliceData(args[0]), len(args[0])), policies: len(args) == 1,
		lim: Limit{Algorithm: DefaultAlgorithm}, cost: 1}
	if a.policies {
		return a, nil
	}
	var ok bool
	if a.lim.Limit, ok = parseInt(args[1]); !ok {
		return a, &ArgError{"limit is not an integer or out of range"}
	}
	ms, ok := parseInt(args[2])
	if !ok || ms <= 0 || ms > int64(MaxPeriod/time.Millisecond) {
		return a, &ArgError{"period_ms is not a positive integer in range"}
	}
	a.lim.Period = time.Duration(ms) * time.Millisecond
	if len(args) > 3 {
		if a.cost, ok = parseInt(args[3]); !ok {
			return a, &ArgError{"cost is not an integer or out of range"}
		}
	}
	if len(args) > 4 {
		var err error
		if a.lim.Algorithm, err = parseAlgorithmBytes(args[4]); err != nil {
			return a, err
		}
	}
	if len(args) > 5 {
		if a.lim.Burst, ok = parseInt(args[5]); !ok {
			return a, &ArgError{"burst is not an integer or out of range"}
		}
	}
	return a, nil
}

// argsReply is the reply of RL.CHECK for s.
func argsReply(s Status) [4]int64 {
	allowed := int64(0)
	if s.Allowed {
		allowed = 1
	}
	return [4]int64{allowed, s.Remaining, CeilMillis(s.Reset), CeilMillis(s.RetryAfter)}
}

// parseAlgorithmBytes is ParseAlgorithm, case-insensitive, without
// allocating.
func parseAlgorithmBytes(b []byte) (Algorithm, error) {
	for i, n := range algorithmNames {
		if i > 0 && len(b) == len(n) && strings.EqualFold(unsafe.String(unsafe.SliceData(b), len(b)), n) {
			return Algorithm(i), nil
		}
	}
	if strings.EqualFold(string(b), "gcra") {
		return TokenBucket, nil
	}
	return 0, &ArgError{"unknown algorithm " + truncate(string(b), 40)}
}

// parseInt parses a decimal int64 like Redis (no sign '+', no spaces).
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 { // 19 digits fit a uint64
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if n > 1<<63 {
		return 0, false
	}
	if neg {
		return -int64(n), true // -(1<<63) wraps to MinInt64, which is right
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}
