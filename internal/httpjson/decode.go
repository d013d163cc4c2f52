package httpjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/counterd/counterd/internal/contract"
)

// ReadBody reads the whole request body, at most max bytes: a longer body
// is ErrBodyTooLarge, a failed read ErrInvalidJSON.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: at most %d bytes", ErrBodyTooLarge, mbe.Limit)
		}
		return nil, fmt.Errorf("%w: reading body: %v", ErrInvalidJSON, err)
	}
	return b, nil
}

// DecodeStrict decodes the JSON object b into v. It rejects unknown fields
// and trailing data (ErrInvalidJSON) and values of the wrong type
// (contract.ErrInvalidArgument). An error that a field's UnmarshalJSON
// returns (a field-level validation error, which the caller classifies
// when Classify does not know it) is returned as it is. An empty body decodes as {}.
func DecodeStrict(b []byte, v any) error {
	b = TrimSpace(b)
	if len(b) == 0 {
		b = []byte("{}")
	}
	if b[0] != '{' {
		if json.Valid(b) {
			return invalidArgf("body must be a JSON object")
		}
		return fmt.Errorf("%w: body is not a JSON object", ErrInvalidJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return DecodeError(err)
	}
	if rest := TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidJSON)
	}
	return nil
}

// DecodeError classifies an error of encoding/json: a field's own
// validation error (any error encoding/json did not make) as it is, a value of the wrong type
// contract.ErrInvalidArgument, anything else (syntax, unknown field,
// truncation) ErrInvalidJSON.
func DecodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	if _, status := Classify(err); status != http.StatusInternalServerError {
		return err // a field's own validation error
	}
	if !errors.As(err, &te) && !errors.As(err, &se) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.HasPrefix(err.Error(), "json: ") {
		// A field's UnmarshalJSON refused its value with an error of
		// the caller's (a rate-limit policy's): the caller classifies it.
		return err
	}
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "body"
		}
		return invalidArgf("%s: expected %s, got JSON %s", field, te.Type, te.Value)
	}
	// Syntax errors, unexpected EOF and unknown fields.
	return fmt.Errorf("%w: %s", ErrInvalidJSON, strings.TrimPrefix(err.Error(), "json: "))
}

// TrimSpace trims JSON whitespace (space, tab, CR, LF) at both ends.
func TrimSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// invalidArgf returns an error wrapping contract.ErrInvalidArgument.
func invalidArgf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", contract.ErrInvalidArgument, fmt.Sprintf(format, args...))
}
