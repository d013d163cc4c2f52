package rollup

import "strings"

var sparkRunes = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws values as one line of block characters, lowest value ▁,
// highest █, scaled linearly between them (all equal: all ▁). Use
// Downsample first to fit a terminal.
func Sparkline(values []int64) string {
	if len(values) == 0 {
		return ""
	}
	lo, hi := values[0], values[0]
	for _, v := range values {
		lo, hi = min(lo, v), max(hi, v)
	}
	var b strings.Builder
	b.Grow(len(values) * 3)
	span := float64(hi) - float64(lo)
	for _, v := range values {
		i := 0
		if span > 0 {
			i = int((float64(v)-float64(lo))/span*float64(len(sparkRunes)-1) + 0.5)
		}
		b.WriteRune(sparkRunes[i])
	}
	return b.String()
}

// Downsample sums consecutive values into at most width groups of equal
// size (the last may be shorter), saturating at the int64 limits. It
// returns values itself when they already fit.
func Downsample(values []int64, width int) []int64 {
	if width <= 0 || len(values) <= width {
		return values
	}
	per := (len(values) + width - 1) / width
	out := make([]int64, 0, width)
	for i := 0; i < len(values); i += per {
		var s int64
		for _, v := range values[i:min(i+per, len(values))] {
			s = satAdd(s, v)
		}
		out = append(out, s)
	}
	return out
}
