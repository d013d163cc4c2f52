package counter

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Float is a float counter: a decimal number kept as the text Redis's
// INCRBYFLOAT stores, so that reads answer exactly what Redis answers.
//
// Redis (on x86-64, where C's long double is the x87 80-bit format) parses
// both the stored text and the increment with strtold, adds them in long
// double arithmetic (64-bit mantissa, round to nearest even, exponent up
// to 2^16383), refuses a NaN or infinite sum, and stores the sum printed
// with "%.17Lf" with trailing zeros (and a trailing point) removed. Float
// does the same with math/big at 64 bits of precision: ParseFloat is a
// strict strtold (correctly rounded, as glibc's is) and Text is the stored
// text. The text is the state: it re-parses to the value the next
// increment starts from, as in Redis.
//
// The zero Float is 0. Float is not safe for concurrent use.
type Float struct {
	text string // canonical: what formatLD writes; "" means "0"
}

// MaxFloatText is the longest text ParseFloat accepts (Redis's
// MAX_LONG_DOUBLE_CHARS minus its terminator).
const MaxFloatText = 5*1024 - 1

const (
	floatFormat byte = 1
	ldPrec           = 64     // x87 extended mantissa bits
	ldMaxExp         = 16384  // |x| < 2^16384 (big.Float exponent of the largest finite)
	ldMinExp         = -16381 // smallest normal is 0.5 * 2^-16381 (= 2^-16382)
	ldSubShift       = 16445  // subnormals are k * 2^-16445
)

// ParseFloat parses s like Redis's string2ld: strtold's grammar (decimal,
// hexadecimal with a binary exponent, inf and infinity in any case, an
// optional sign), the whole of s, no leading white space, not NaN, and not
// beyond the long double range (overflow, or a non-zero value rounding to
// zero).
// The error wraps ErrInvalid; an infinite value is returned without error
// (as strtold does), callers that must refuse it check IsInf. A NUL byte
// is refused: Redis checks that strtold read every byte.
func ParseFloat(s string) (*big.Float, error) {
	if len(s) == 0 || len(s) > MaxFloatText {
		return nil, fmt.Errorf("%w: not a valid float", ErrInvalid)
	}
	if isCSpace(s[0]) {
		return nil, fmt.Errorf("%w: not a valid float", ErrInvalid)
	}
	f, ok := parseLD(s)
	if !ok {
		return nil, fmt.Errorf("%w: not a valid float", ErrInvalid)
	}
	return f, nil
}

func isCSpace(c byte) bool {
	return c == ' ' || (c >= '\t' && c <= '\r')
}

func newLD() *big.Float { return new(big.Float).SetPrec(ldPrec).SetMode(big.ToNearestEven) }

// parseLD parses the whole of s as strtold would, without leading space.
func parseLD(s string) (*big.Float, bool) {
	neg := false
	if s[0] == '+' || s[0] == '-' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if l := strings.ToLower(s); l == "inf" || l == "infinity" {
		return newLD().SetInf(neg), true
	}
	var mant big.Int
	var exp int64 // value = mant * base^exp (base 10, or 2 for hex)
	hex := len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')
	// Hex: hex digits, each fraction digit worth 2^-4, exponent p (base 2).
	// Decimal: fraction digits worth 10^-1, exponent e (base 10).
	base, skip, fracExp, expChar := 10, 0, int64(1), byte('e')
	if hex {
		base, skip, fracExp, expChar = 16, 2, 4, 'p'
	}
	digits, frac, sig, ok := scanMantissa(s[skip:], base, &mant)
	if !ok {
		return nil, false
	}
	s = s[skip+digits:]
	exp = -fracExp * int64(frac)
	if len(s) > 0 && (s[0]|0x20) == expChar {
		e, ok := scanExp(s[1:])
		if !ok {
			return nil, false
		}
		exp += e
		s = ""
	}
	if s != "" {
		return nil, false
	}
	if mant.Sign() == 0 {
		return signedZero(neg), true
	}
	// Bound the magnitude before computing it exactly: sig significant
	// digits times base^exp lies in [base^(exp+sig-1), base^(exp+sig)).
	var lo, hi int64
	if hex {
		lo, hi = exp+4*int64(sig-1), exp+4*int64(sig)
		if lo >= ldMaxExp {
			return nil, false
		}
		if hi < -ldSubShift-1 {
			return nil, false
		}
	} else {
		lo, hi = exp+int64(sig-1), exp+int64(sig)
		if lo >= 4933 { // 10^4933 > the largest long double
			return nil, false
		}
		if hi < -4951 { // below half the smallest subnormal: rounds to 0
			return nil, false
		}
	}
	var r big.Rat
	expBase := big.NewInt(10) // of exp: 2 for hex
	if hex {
		expBase = big.NewInt(2)
	}
	p := new(big.Int).Exp(expBase, big.NewInt(abs64(exp)), nil)
	if exp >= 0 {
		r.SetInt(p.Mul(p, &mant))
	} else {
		r.SetFrac(&mant, p)
	}
	if neg {
		r.Neg(&r)
	}
	// Below 2^-16382 (about 3.36e-4932) long doubles are subnormal.
	tiny := (hex && lo < -16382) || (!hex && lo < -4932)
	return roundLD(&r, tiny)
}

func signedZero(neg bool) *big.Float {
	z := newLD()
	if neg {
		z.Neg(z)
	}
	return z
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// scanMantissa reads digits with at most one point into mant and reports
// the bytes read, the digits after the point, the significant digits
// (from the first non-zero one) and whether there was at least one digit.
func scanMantissa(s string, base int, mant *big.Int) (n, frac, sig int, ok bool) {
	point := false
	var buf []byte
	for ; n < len(s); n++ {
		c := s[n]
		if c == '.' && !point {
			point = true
			continue
		}
		d := digitVal(c)
		if d >= base {
			break
		}
		ok = true
		if point {
			frac++
		}
		if d != 0 || len(buf) > 0 {
			buf = append(buf, c)
		}
	}
	if len(buf) > 0 {
		mant.SetString(string(buf), base)
	}
	return n, frac, len(buf), ok
}

func digitVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return 99
}

// scanExp reads the whole of s as [sign]digits, saturating far beyond
// any exponent that matters.
func scanExp(s string) (int64, bool) {
	neg := false
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	var e int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		if e < 1<<40 {
			e = e*10 + int64(s[i]-'0')
		}
	}
	if neg {
		e = -e
	}
	return e, true
}

// roundLD rounds the exact non-zero r to a finite long double, or reports
// that it overflows or rounds to zero (strtold's ERANGE cases Redis
// refuses). tiny says r may be below the normal range (the check is
// costly: numbers of 16k bits).
func roundLD(r *big.Rat, tiny bool) (*big.Float, bool) {
	f := newLD()
	if !tiny {
		f.SetRat(r)
		if f.MantExp(nil) > ldMaxExp {
			return nil, false
		}
		return f, true
	}
	// Subnormal range: |r| < 2^-16382 has a fixed quantum of 2^-16445.
	var minNormal big.Rat
	minNormal.SetFrac(big.NewInt(1), new(big.Int).Lsh(big.NewInt(1), 16382))
	var a big.Rat
	a.Abs(r)
	if a.Cmp(&minNormal) < 0 {
		var scaled big.Rat
		scaled.Mul(r, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), ldSubShift)))
		k := roundHalfEven(&scaled)
		if k.Sign() == 0 {
			return nil, false
		}
		f.SetInt(k)
		f.SetMantExp(f, -ldSubShift)
		return f, true
	}
	f.SetRat(r)
	if f.MantExp(nil) > ldMaxExp {
		return nil, false
	}
	return f, true
}

// roundHalfEven rounds r to the nearest integer, ties to even.
func roundHalfEven(r *big.Rat) *big.Int {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	// |2m| against the denominator decides; QuoRem truncates towards zero.
	m2 := new(big.Int).Abs(m)
	m2.Lsh(m2, 1)
	switch c := m2.Cmp(r.Denom()); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		if r.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return q
}

// formatLD is Redis's ld2string in human mode: "%.17Lf" with the trailing
// zeros and point removed, and "-0" written "0".
func formatLD(f *big.Float) string {
	s := f.Text('f', 17)
	if strings.IndexByte(s, '.') >= 0 {
		s = strings.TrimRight(s, "0")
		s = strings.TrimSuffix(s, ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// finite reports whether f is within the long double range.
func finite(f *big.Float) bool {
	return !f.IsInf() && (f.Sign() == 0 || f.MantExp(nil) <= ldMaxExp)
}

// FloatOf returns a Float holding v (an int64 is exact in a long double).
func FloatOf(v int64) *Float {
	return &Float{text: strconv.FormatInt(v, 10)}
}

// Text is the value as Redis would answer it ("0" for the zero Float).
func (x *Float) Text() string {
	if x.text == "" {
		return "0"
	}
	return x.text
}

// value parses x's text (always valid: x only holds what formatLD wrote or
// UnmarshalBinary checked).
func (x *Float) value() *big.Float {
	f, err := ParseFloat(x.Text())
	if err != nil {
		panic("counter: Float holds an invalid text " + strconv.Quote(x.text))
	}
	return f
}

// Add adds the increment incr (text, parsed by ParseFloat) and returns the
// new text. An increment that does not parse wraps ErrInvalid; a sum that
// is infinite (or an infinite increment) wraps ErrOverflow. On error x is
// unchanged.
func (x *Float) Add(incr string) (string, error) {
	d, err := ParseFloat(incr)
	if err != nil {
		return "", err
	}
	return x.AddValue(d)
}

// AddValue is Add with a parsed increment.
func (x *Float) AddValue(d *big.Float) (string, error) {
	if d.IsInf() {
		return "", fmt.Errorf("%w: increment would produce NaN or Infinity", ErrOverflow)
	}
	sum := newLD().Add(x.value(), d)
	if !finite(sum) {
		return "", fmt.Errorf("%w: increment would produce NaN or Infinity", ErrOverflow)
	}
	x.text = formatLD(sum)
	if x.text == "0" {
		x.text = ""
	}
	return x.Text(), nil
}

// Int64 returns x's value when its text is an integer as Redis's string2ll
// reads one (so INCR applies to it), and false otherwise.
func (x *Float) Int64() (int64, bool) {
	t := x.Text()
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != t {
		return 0, false
	}
	return v, true
}

// Float64 is x's value rounded to the nearest float64 (for JSON and
// metrics; Text is exact).
func (x *Float) Float64() float64 {
	f, _ := x.value().Float64()
	return f
}

// Clone returns a copy of x.
func (x *Float) Clone() *Float { c := *x; return &c }

// MarshalBinary encodes x as its format byte followed by its text.
func (x *Float) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 1+len(x.text))
	b = append(b, floatFormat)
	return append(b, x.text...), nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. The text must be
// canonical: what Add would have produced for its value.
func (x *Float) UnmarshalBinary(b []byte) error {
	if len(b) < 1 || b[0] != floatFormat {
		return fmt.Errorf("%w: float: bad format byte", ErrCorrupt)
	}
	t := string(b[1:])
	if t == "" {
		x.text = ""
		return nil
	}
	f, err := ParseFloat(t)
	if err != nil || !finite(f) || formatLD(f) != t || t == "0" {
		return fmt.Errorf("%w: float: %q is not a canonical value", ErrCorrupt, t)
	}
	x.text = t
	return nil
}

// CanonicalFloat reports whether s is a finite float written exactly as
// Float.Text writes one (Redis's INCRBYFLOAT text): what a SET or HSET may
// store as a float, since reading it back answers s unchanged. "0" is
// canonical, "0.0", "1e3" and "-0" are not.
func CanonicalFloat(s string) bool {
	if s == "" || len(s) > MaxFloatText {
		return false
	}
	// Canonical text is digits, at most one point, an optional leading
	// '-': refuse anything else before the costly parse.
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && c != '.' && !(c == '-' && i == 0) {
			return false
		}
	}
	f, err := ParseFloat(s)
	return err == nil && finite(f) && formatLD(f) == s
}

// FloatOfText returns a Float holding the canonical text t
// (CanonicalFloat), or an error wrapping ErrInvalid.
func FloatOfText(t string) (*Float, error) {
	if !CanonicalFloat(t) {
		return nil, fmt.Errorf("%w: %s is not a float in canonical text", ErrInvalid, shortText(t))
	}
	if t == "0" {
		t = ""
	}
	return &Float{text: t}, nil
}
