package engine

import (
	"fmt"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/rollup"
)

// NoSketchesError is the error of a unique count asked of an hll counter
// that exists but keeps no sketches of the unit asked for. It matches
// ErrNotFound (there is no data to answer from) and its message says how
// to start keeping them.
type NoSketchesError struct {
	ID   string
	Unit rollup.Granularity // rollup.Hour or rollup.Day
}

func (e *NoSketchesError) Error() string {
	flag, ret := "--unique-days", "30d"
	if e.Unit == rollup.Hour {
		flag, ret = "--unique-hours", "48h"
	}
	ns := namespace(e.ID)
	return fmt.Sprintf("engine: %q is an hll without per-%s sketches, so it has no unique counts by %s yet: "+
		"give its namespace a rollup (counterctl rollup set %s %s %s, or PUT /rollups/%s) and items added from then on are counted",
		e.ID, e.Unit, e.Unit, ns, flag, ret, ns)
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NoSketchesError) Is(target error) bool { return target == contract.ErrNotFound }

// NoSketches is the error of Uniques for id with no sketches of unit:
// a *NoSketchesError when id is a live hll counter, else the plain
// ErrNotFound of a counter without rollups.
func NoSketches(id string, unit rollup.Granularity, isHLL bool) error {
	if isHLL {
		return &NoSketchesError{ID: id, Unit: unit}
	}
	return fmt.Errorf("%w: %q: %v (%s sketches)", contract.ErrNotFound, id, errNoRollups, unit)
}
