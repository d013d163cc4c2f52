package engine

import (
	"github.com/counterd/counterd/internal/contract"
)

// Limits returns what Apply and ApplyBatch accept.
func (e *Engine) Limits() contract.Limits { return e.limits }
