package ratelimitapi

import (
	"encoding/json"
	"strconv"

	"github.com/counterd/counterd/internal/api/httpapi"
	"github.com/counterd/counterd/internal/ratelimit"
)

// The JSON of POST /ratelimit/check without encoding/json's reflection
// for the common form of the body and of the answer (the hot path).
//
// decodeCheck gives exactly what httpapi.DecodeStrict gives: the fast
// decoder accepts only a subset of the bodies that DecodeStrict accepts
// (field names spelled exactly, each once; strings of printable ASCII
// without escapes; integers without fraction or exponent, in range; no
// null) and decodes them to the same value; any other body, valid or
// not, goes to DecodeStrict, which decodes it or says why not. The fuzz
// test FuzzDecodeCheck checks both halves.

// decodeCheck strictly decodes a check body (an empty body is {}).
func decodeCheck(b []byte, req *ratelimit.CheckRequest) error {
	if decodeCheckFast(b, req) {
		return nil
	}
	*req = ratelimit.CheckRequest{}
	return httpapi.DecodeStrict(b, req)
}

// decodeCheckFast decodes b into req (zero on entry) when b is in the
// subset it knows, and reports whether it did. false leaves req partly
// set.
func decodeCheckFast(b []byte, req *ratelimit.CheckRequest) bool {
	d := fastDec{b: b}
	d.ws()
	if !d.byte('{') {
		return false
	}
	var seen fields
	ok := d.object(func(name []byte) bool {
		switch string(name) {
		case "key":
			return seen.first(0) && d.str(&req.Key)
		case "cost":
			return seen.first(1) && d.int(&req.Cost)
		case "policy":
			return seen.first(2) && d.str(&req.Policy)
		case "policies":
			return seen.first(3) && d.strings(&req.Policies)
		case "limits":
			return seen.first(4) && d.limits(&req.Limits)
		}
		return false
	})
	if !ok {
		return false
	}
	d.ws()
	return d.i == len(d.b)
}

// fields is the set of an object's members seen so far, by index: the
// fast path takes each member at most once (encoding/json would keep the
// last; such a body goes to it).
type fields uint16

// first marks member i seen and reports whether it was not before.
func (f *fields) first(i uint) bool {
	if *f&(1<<i) != 0 {
		return false
	}
	*f |= 1 << i
	return true
}

type fastDec struct {
	b []byte
	i int
}

func (d *fastDec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\r', '\n':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c after whitespace.
func (d *fastDec) byte(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads the members of an object whose '{' was read, calling
// member after each name and its ':' to read the value.
func (d *fastDec) object(member func(name []byte) bool) bool {
	if d.byte('}') {
		return true
	}
	for {
		d.ws()
		name, ok := d.rawStr()
		if !ok || !d.byte(':') {
			return false
		}
		d.ws()
		if !member(name) {
			return false
		}
		if d.byte(',') {
			continue
		}
		return d.byte('}')
	}
}

// rawStr reads a string of printable ASCII without escapes.
func (d *fastDec) rawStr() ([]byte, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[d.i+1 : j]
			d.i = j + 1
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

func (d *fastDec) str(dst *string) bool {
	s, ok := d.rawStr()
	if ok {
		*dst = string(s)
	}
	return ok
}

// int reads an integer literal: -?(0|[1-9][0-9]*) of at most 18 digits
// (in range), followed by no fraction or exponent.
func (d *fastDec) int(dst *ratelimit.JSONInt) bool {
	j := d.i
	neg := false
	if j < len(d.b) && d.b[j] == '-' {
		neg = true
		j++
	}
	start := j
	var v int64
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		v = v*10 + int64(d.b[j]-'0')
		j++
	}
	n := j - start
	if n == 0 || n > 18 || n > 1 && d.b[start] == '0' {
		return false
	}
	if j < len(d.b) {
		switch d.b[j] {
		case ' ', '\t', '\r', '\n', ',', '}', ']':
		default:
			return false
		}
	}
	if neg {
		v = -v
	}
	d.i = j
	*dst = ratelimit.JSONInt{V: v, Set: true}
	return true
}

func (d *fastDec) strings(dst *[]string) bool {
	if !d.byte('[') {
		return false
	}
	*dst = []string{}
	if d.byte(']') {
		return true
	}
	for {
		d.ws()
		var s string
		if !d.str(&s) {
			return false
		}
		*dst = append(*dst, s)
		if d.byte(',') {
			continue
		}
		return d.byte(']')
	}
}

func (d *fastDec) limits(dst *[]ratelimit.LimitJSON) bool {
	if !d.byte('[') {
		return false
	}
	*dst = []ratelimit.LimitJSON{}
	if d.byte(']') {
		return true
	}
	for {
		if !d.byte('{') {
			return false
		}
		*dst = append(*dst, ratelimit.LimitJSON{})
		if !d.limit(&(*dst)[len(*dst)-1]) {
			return false
		}
		if d.byte(',') {
			continue
		}
		return d.byte(']')
	}
}

func (d *fastDec) limit(l *ratelimit.LimitJSON) bool {
	var seen fields
	return d.object(func(name []byte) bool {
		switch string(name) {
		case "key":
			return seen.first(0) && d.str(&l.Key)
		case "name":
			return seen.first(1) && d.str(&l.Name)
		case "algorithm":
			return seen.first(2) && d.str(&l.Algorithm)
		case "limit":
			return seen.first(3) && d.int(&l.Limit)
		case "period":
			return seen.first(4) && d.str(&l.Period)
		case "period_ms":
			return seen.first(5) && d.int(&l.PeriodMS)
		case "burst":
			return seen.first(6) && d.int(&l.Burst)
		case "cost":
			return seen.first(7) && d.int(&l.Cost)
		}
		return false
	})
}

// appendCheckAnswer appends json.Marshal(a) to dst: by hand when every
// string in a needs no escaping (printable ASCII but '"', '\\', '<', '>'
// and '&', which encoding/json escapes), else by encoding/json.
func appendCheckAnswer(dst []byte, a *ratelimit.CheckAnswer) []byte {
	plain := plainJSON(a.Status) && plainJSON(a.Key)
	for i := range a.Limits {
		l := &a.Limits[i]
		plain = plain && plainJSON(l.Name) && plainJSON(l.Algorithm) && plainJSON(l.Period)
	}
	if !plain || a.Limits == nil {
		b, err := json.Marshal(a)
		if err != nil { // cannot happen: no type of a fails
			panic(err)
		}
		return append(dst, b...)
	}
	dst = append(dst, `{"status":"`...)
	dst = append(dst, a.Status...)
	dst = append(dst, `","allowed":`...)
	dst = strconv.AppendBool(dst, a.Allowed)
	dst = append(dst, `,"key":"`...)
	dst = append(dst, a.Key...)
	dst = append(dst, `","limit":`...)
	dst = strconv.AppendInt(dst, a.Limit, 10)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, a.Remaining, 10)
	dst = append(dst, `,"reset_ms":`...)
	dst = strconv.AppendInt(dst, a.ResetMS, 10)
	dst = append(dst, `,"retry_after_ms":`...)
	dst = strconv.AppendInt(dst, a.RetryAfterMS, 10)
	dst = append(dst, `,"delay_ms":`...)
	dst = strconv.AppendInt(dst, a.DelayMS, 10)
	dst = append(dst, `,"limits":[`...)
	for i := range a.Limits {
		l := &a.Limits[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":"`...)
		dst = append(dst, l.Name...)
		dst = append(dst, `","algorithm":"`...)
		dst = append(dst, l.Algorithm...)
		dst = append(dst, `","limit":`...)
		dst = strconv.AppendInt(dst, l.Limit, 10)
		dst = append(dst, `,"period":"`...)
		dst = append(dst, l.Period...)
		dst = append(dst, '"')
		if l.Burst != 0 {
			dst = append(dst, `,"burst":`...)
			dst = strconv.AppendInt(dst, l.Burst, 10)
		}
		dst = append(dst, `,"cost":`...)
		dst = strconv.AppendInt(dst, l.Cost, 10)
		dst = append(dst, `,"allowed":`...)
		dst = strconv.AppendBool(dst, l.Allowed)
		dst = append(dst, `,"remaining":`...)
		dst = strconv.AppendInt(dst, l.Remaining, 10)
		dst = append(dst, `,"reset_ms":`...)
		dst = strconv.AppendInt(dst, l.ResetMS, 10)
		dst = append(dst, `,"retry_after_ms":`...)
		dst = strconv.AppendInt(dst, l.RetryAfterMS, 10)
		dst = append(dst, `,"delay_ms":`...)
		dst = strconv.AppendInt(dst, l.DelayMS, 10)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// plainJSON reports whether encoding/json writes s as it is in quotes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
