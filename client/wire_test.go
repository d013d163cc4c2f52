package client

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// TestWireDurationAndTime: the JSON forms the server sends for durations
// and times (string, bare number, null, empty string) and the errors for
// anything else.
func TestWireDurationAndTime(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"1s"`, time.Second, false},
		{`"1m30s"`, 90 * time.Second, false},
		{`1500`, 1500 * time.Millisecond, false},
		{`0.5`, 500 * time.Microsecond, false},
		{`""`, 0, false},
		{`null`, 7, false}, // null leaves the value alone
		{`"soon"`, 0, true},
		{`true`, 0, true},
		{`"1s`, 0, true},
		{`1e300`, 0, true},
	} {
		d := wireDuration(7)
		err := json.Unmarshal([]byte(c.in), &d)
		if (err != nil) != c.wantErr || (err == nil && time.Duration(d) != c.want) {
			t.Errorf("duration %s: got %v, %v; want %v (error %v)", c.in, time.Duration(d), err, c.want, c.wantErr)
		}
	}
	at := time.Date(2026, 11, 27, 10, 0, 0, 500_000_000, time.UTC)
	for _, c := range []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{`"2026-11-27T10:00:00.5Z"`, at, false},
		{strconv.FormatInt(at.UnixMilli(), 10), at, false},
		{`null`, time.Time{}, false},
		{`""`, time.Time{}, false},
		{`"yesterday"`, time.Time{}, true},
		{`1.5`, time.Time{}, true},
	} {
		var tm wireTime
		err := json.Unmarshal([]byte(c.in), &tm)
		if (err != nil) != c.wantErr || (err == nil && !time.Time(tm).Equal(c.want)) {
			t.Errorf("time %s: got %v, %v; want %v (error %v)", c.in, time.Time(tm), err, c.want, c.wantErr)
		}
	}
}

// FuzzWireDuration: any input either fails or decodes; a number of
// milliseconds written back as JSON decodes to the same milliseconds
// (float arithmetic may move it by nanoseconds below them).
func FuzzWireDuration(f *testing.F) {
	for _, s := range []string{`"1s"`, `12`, `null`, `""`, `"x"`, `-3.5`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d wireDuration
		if json.Unmarshal(b, &d) != nil {
			return
		}
		ms := strconv.FormatInt(time.Duration(d).Milliseconds(), 10)
		var again wireDuration
		if err := json.Unmarshal([]byte(ms), &again); err != nil {
			t.Fatalf("%s decoded to %v, but its milliseconds %s do not decode: %v", b, time.Duration(d), ms, err)
		}
		if time.Duration(again).Milliseconds() != time.Duration(d).Milliseconds() {
			t.Fatalf("%s: %v, round trip %v", b, time.Duration(d), time.Duration(again))
		}
	})
}
