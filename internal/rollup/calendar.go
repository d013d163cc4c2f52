package rollup

import "time"

// Buckets are numbered from the Unix epoch in UTC: minute b covers
// [b*60s, (b+1)*60s), hour and day likewise, and month b is calendar month
// b%12+1 of year 1970+b/12 (floor division). Buckets are grouped in chunks,
// the unit of storage: the minutes of one hour, the hours of one day, the
// days of one calendar month, the months of one year. A chunk's index is the
// hour, day, month or year (since 1970) it covers.

const (
	nsMinute = int64(time.Minute)
	nsHour   = int64(time.Hour)
	nsDay    = 24 * nsHour
)

// Times outside [minTime, maxTime) are refused by queries; the engine's
// clock never gets there.
var (
	minTime = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	maxTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
)

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Bucket returns the number of g's bucket that holds t (unix ns).
func (g Granularity) Bucket(t int64) int64 {
	switch g {
	case Minute:
		return floorDiv(t, nsMinute)
	case Hour:
		return floorDiv(t, nsHour)
	case Day:
		return floorDiv(t, nsDay)
	}
	y, m, _ := time.Unix(0, t).UTC().Date()
	return int64(y-1970)*12 + int64(m-1)
}

// Start returns the start (unix ns) of g's bucket b.
func (g Granularity) Start(b int64) int64 {
	switch g {
	case Minute:
		return b * nsMinute
	case Hour:
		return b * nsHour
	case Day:
		return b * nsDay
	}
	y := floorDiv(b, 12)
	return time.Date(1970+int(y), time.Month(b-y*12+1), 1, 0, 0, 0, 0, time.UTC).UnixNano()
}

// chunkOf returns the chunk that holds g's bucket b and b's offset in it.
func (g Granularity) chunkOf(b int64) (int64, int) {
	switch g {
	case Minute:
		c := floorDiv(b, 60)
		return c, int(b - c*60)
	case Hour:
		c := floorDiv(b, 24)
		return c, int(b - c*24)
	case Day:
		y, m, d := time.Unix(b*86400, 0).UTC().Date()
		return int64(y-1970)*12 + int64(m-1), d - 1
	}
	c := floorDiv(b, 12)
	return c, int(b - c*12)
}

// chunkFirst returns the first bucket of g's chunk c.
func (g Granularity) chunkFirst(c int64) int64 {
	switch g {
	case Minute:
		return c * 60
	case Hour:
		return c * 24
	case Day:
		return Month.Start(c) / nsDay
	}
	return c * 12
}

// chunkLen returns the number of buckets in g's chunk c.
func (g Granularity) chunkLen(c int64) int {
	switch g {
	case Minute:
		return 60
	case Hour:
		return 24
	case Day:
		return int(g.chunkFirst(c+1) - g.chunkFirst(c))
	}
	return 12
}

// validChunk reports whether g's chunk c lies within [minTime, maxTime).
func (g Granularity) validChunk(c int64) bool {
	lo, _ := g.chunkOf(g.Bucket(minTime))
	hi, _ := g.chunkOf(g.Bucket(maxTime - 1))
	return c >= lo && c <= hi
}

// validBucket reports whether g's bucket b lies within [minTime, maxTime).
func (g Granularity) validBucket(b int64) bool {
	return b >= g.Bucket(minTime) && b <= g.Bucket(maxTime-1)
}
