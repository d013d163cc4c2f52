package collector

import (
	"encoding/json"
	"net/http"
)

// errorBody has the shape of every counterd HTTP error answer.
func errorBody(code, msg string, index *int) any {
	type detail struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Index   *int   `json:"index,omitempty"`
	}
	return struct {
		Status string `json:"status"`
		Error  detail `json:"error"`
		Index  *int   `json:"index,omitempty"`
	}{"error", detail{code, msg, index}, index}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
