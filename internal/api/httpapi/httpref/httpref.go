// Package httpref renders the OpenAPI document of the HTTP API
// (internal/api/httpapi/openapi.json) as the Markdown reference page
// docs/http-reference.md. Regenerate the page with "go generate
// ./internal/api/httpapi" (or make docs); a test fails when it is stale.
package httpref

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Markdown renders the OpenAPI document spec.
func Markdown(spec []byte) ([]byte, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# HTTP API reference\n\n")
	w("<!-- Generated from internal/api/httpapi/openapi.json by internal/api/httpapi/httpref\n")
	w("     (go generate ./internal/api/httpapi); do not edit. -->\n\n")
	w("%s\n\n", doc.Info.Description)
	w("OpenAPI %s, API version %s; the document itself is served at `GET /openapi.json`.", doc.OpenAPI, doc.Info.Version)
	for _, s := range doc.Servers {
		w(" Server: `%s` (%s).", s.URL, s.Description)
	}
	w("\n\n")

	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	type entry struct {
		method, path string
		item         *openapi3.PathItem
		op           *openapi3.Operation
	}
	var ops []entry
	for _, p := range paths {
		item := doc.Paths.Value(p)
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
			if op := item.GetOperation(m); op != nil {
				ops = append(ops, entry{m, p, item, op})
			}
		}
	}

	w("## Routes\n\n| method | path | summary |\n|---|---|---|\n")
	for _, e := range ops {
		w("| %s | [`%s`](#%s) | %s |\n", e.method, e.path, anchor(e.op.OperationID), cell(e.op.Summary))
	}
	w("\n## Errors\n\nEvery error answers the `Error` schema: `{\"status\":\"error\",\"error\":{\"code\",\"message\"}}`. Codes:\n\n")
	if es := doc.Components.Schemas["Error"]; es != nil && es.Value != nil {
		if c := es.Value.Properties["error"]; c != nil && c.Value != nil {
			if code := c.Value.Properties["code"]; code != nil && code.Value != nil {
				var codes []string
				for _, v := range code.Value.Enum {
					codes = append(codes, fmt.Sprintf("`%v`", v))
				}
				w("%s.\n\n", strings.Join(codes, ", "))
			}
		}
	}
	w("| response | status meaning |\n|---|---|\n")
	for _, name := range sortedKeys(doc.Components.Responses) {
		r := doc.Components.Responses[name].Value
		w("| `%s` | %s |\n", name, cell(deref(r.Description)))
	}

	w("\n## Operations\n")
	for _, e := range ops {
		op := e.op
		w("\n### %s %s\n\n<a id=\"%s\"></a>%s\n", e.method, e.path, anchor(op.OperationID), op.Summary)
		if op.Description != "" {
			w("\n%s\n", op.Description)
		}
		servers := e.item.Servers
		if op.Servers != nil {
			servers = *op.Servers
		}
		for _, s := range servers {
			w("\nServed on `%s`: %s.\n", s.URL, s.Description)
		}
		params := append(openapi3.Parameters{}, e.item.Parameters...)
		params = append(params, op.Parameters...)
		if len(params) > 0 {
			w("\n| parameter | in | required | type | description |\n|---|---|---|---|---|\n")
			for _, pr := range params {
				p := pr.Value
				w("| `%s` | %s | %v | %s | %s |\n", p.Name, p.In, p.Required, schemaType(p.Schema), cell(p.Description))
			}
		}
		if rb := op.RequestBody; rb != nil && rb.Value != nil {
			w("\nRequest body%s:", map[bool]string{true: " (required)"}[rb.Value.Required])
			for _, ct := range sortedKeys(rb.Value.Content) {
				w(" `%s` %s;", ct, schemaType(rb.Value.Content[ct].Schema))
			}
			b.Truncate(b.Len() - 1)
			w(".\n")
		}
		w("\n| status | answer |\n|---|---|\n")
		for _, code := range sortedKeys(op.Responses.Map()) {
			rr := op.Responses.Value(code)
			r := rr.Value
			desc := deref(r.Description)
			if rr.Ref != "" {
				desc = fmt.Sprintf("`%s`: %s", refName(rr.Ref), desc)
			}
			var cts []string
			for _, ct := range sortedKeys(r.Content) {
				cts = append(cts, fmt.Sprintf("`%s` %s", ct, schemaType(r.Content[ct].Schema)))
			}
			if len(cts) > 0 {
				desc += " — " + strings.Join(cts, ", ")
			}
			w("| %s | %s |\n", code, cell(desc))
		}
	}

	w("\n## Schemas\n")
	for _, name := range sortedKeys(doc.Components.Schemas) {
		s := doc.Components.Schemas[name].Value
		w("\n### %s\n\n<a id=\"schema-%s\"></a>", name, strings.ToLower(name))
		if s.Description != "" {
			w("%s\n", s.Description)
		} else {
			w("\n")
		}
		if len(s.OneOf) > 0 {
			var alts []string
			for _, a := range s.OneOf {
				alts = append(alts, schemaType(a))
			}
			w("\nOne of: %s.\n", strings.Join(alts, ", "))
		}
		if len(s.Properties) == 0 {
			if len(s.OneOf) == 0 {
				w("\nType: %s.\n", schemaType(doc.Components.Schemas[name]))
			}
			continue
		}
		required := map[string]bool{}
		for _, r := range s.Required {
			required[r] = true
		}
		w("\n| field | type | required | description |\n|---|---|---|---|\n")
		for _, f := range sortedKeys(s.Properties) {
			p := s.Properties[f]
			desc := ""
			if p.Value != nil {
				desc = p.Value.Description
				if len(p.Value.Enum) > 0 && p.Ref == "" {
					var vs []string
					for _, v := range p.Value.Enum {
						vs = append(vs, fmt.Sprintf("`%v`", v))
					}
					desc = strings.TrimSpace(desc + " one of " + strings.Join(vs, ", "))
				}
			}
			w("| `%s` | %s | %v | %s |\n", f, schemaType(p), required[f], cell(desc))
		}
	}
	return b.Bytes(), nil
}

// schemaType describes a schema in a few words: a link to a named
// schema, or its type (arrays with their items).
func schemaType(s *openapi3.SchemaRef) string {
	if s == nil {
		return ""
	}
	if s.Ref != "" {
		n := refName(s.Ref)
		return fmt.Sprintf("[%s](#schema-%s)", n, strings.ToLower(n))
	}
	v := s.Value
	if v != nil && len(v.OneOf) > 0 && (v.Type == nil || len(*v.Type) == 0) {
		alts := make([]string, len(v.OneOf))
		for i, a := range v.OneOf {
			alts[i] = schemaType(a)
		}
		return "one of " + strings.Join(alts, ", ")
	}
	if v == nil || v.Type == nil || len(*v.Type) == 0 {
		return "any"
	}
	t := (*v.Type)[0]
	switch t {
	case "array":
		return "array of " + schemaType(v.Items)
	case "object":
		if v.AdditionalProperties.Schema != nil {
			return "object of " + schemaType(v.AdditionalProperties.Schema)
		}
	}
	if v.Format != "" {
		t += " (" + v.Format + ")"
	}
	if v.Nullable {
		t += " or null"
	}
	return t
}

func refName(ref string) string { return ref[strings.LastIndexByte(ref, '/')+1:] }

func anchor(opID string) string { return "op-" + strings.ReplaceAll(opID, "_", "-") }

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(s), "\n", " "), "|", `\|`)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
