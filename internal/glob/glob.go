// Package glob matches Redis-style glob patterns (*, ?, [abc], [^a], [a-z],
// backslash escapes) without backtracking blow-ups: one pass with a single
// remembered star, O(len(pattern)*len(s)) at worst.
package glob

// Match reports whether s matches the Redis-style pattern: * (any run), ?
// (one byte), [abc], [^abc], [a-z] and \ to escape. It runs in
// O(len(pattern)*len(s)) at worst, never exponentially.
func Match[S string | []byte](pattern string, s S) bool {
	p, i := 0, 0
	starP, starI := -1, 0
	for i < len(s) {
		if p < len(pattern) {
			switch pattern[p] {
			case '*':
				starP, starI = p, i
				p++
				continue
			case '?':
				p++
				i++
				continue
			case '[':
				if ok, next := matchClass(pattern, p, s[i]); next > 0 && ok {
					p = next
					i++
					continue
				}
			case '\\':
				if p+1 < len(pattern) && pattern[p+1] == s[i] {
					p += 2
					i++
					continue
				}
				if p+1 == len(pattern) && s[i] == '\\' { // a trailing \ is literal
					p++
					i++
					continue
				}
			default:
				if pattern[p] == s[i] {
					p++
					i++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starI++
		p, i = starP+1, starI
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchClass matches c against the class starting at pattern[p] == '['. It
// returns the index after the class, or 0 if the class is not closed (then
// '[' is matched literally by the caller's default rules: no match here).
func matchClass(pattern string, p int, c byte) (bool, int) {
	p++
	neg := p < len(pattern) && pattern[p] == '^'
	if neg {
		p++
	}
	matched := false
	for first := true; p < len(pattern); first = false {
		if pattern[p] == ']' && !first {
			return matched != neg, p + 1
		}
		lo := pattern[p]
		if lo == '\\' && p+1 < len(pattern) {
			p++
			lo = pattern[p]
		}
		hi := lo
		if p+2 < len(pattern) && pattern[p+1] == '-' && pattern[p+2] != ']' {
			hi = pattern[p+2]
			p += 2
			if lo > hi {
				lo, hi = hi, lo
			}
		}
		if lo <= c && c <= hi {
			matched = true
		}
		p++
	}
	return false, 0
}
