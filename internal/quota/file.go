package quota

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrInvalidFile is wrapped by every error of Parse.
var ErrInvalidFile = errors.New("quota: invalid quotas file")

// MaxFileBytes bounds a quotas file.
const MaxFileBytes = 1 << 20

// maxPatternLen is the longest pattern, like a counter id.
const maxPatternLen = 255

// Limits are the bounds of one quota; 0 means not bounded.
type Limits struct {
	MaxKeys       int64 `json:"max_keys,omitempty"`        // keys (counters) under the quota
	MaxHashFields int64 `json:"max_hash_fields,omitempty"` // fields of one hash counter
}

// Rule is one quota of a file: the ids matching Pattern.
type Rule struct {
	Pattern string
	Limits
	Line int // in the file, for messages
}

// Config is a parsed quotas file. It is immutable once parsed.
type Config struct {
	Rules   []Rule // in file order: the first match wins
	Default *Limits
}

// Load reads and parses the quotas file at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse reads a quotas file. It is strict: an unknown key, a duplicate
// pattern, a limit that is not a positive integer are errors. Every error
// found is reported, each with its line; the error wraps ErrInvalidFile.
func Parse(r io.Reader) (*Config, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidFile, MaxFileBytes)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &Config{}, nil // an empty file: no quotas
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: line %d: more than one YAML document", ErrInvalidFile, extra.Line)
	}
	p := &parser{}
	c := p.file(&doc)
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidFile, strings.Join(p.errs, "; "))
	}
	return c, nil
}

// parser collects every error of a file.
type parser struct{ errs []string }

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf("line %d: ", n.Line)+fmt.Sprintf(format, args...))
}

func (p *parser) file(doc *yaml.Node) *Config {
	c := &Config{}
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return c
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "the file must be a mapping with namespaces and default")
		return c
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			p.errorf(k, "%q given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "namespaces":
			c.Rules = p.rules(v)
		case "default":
			l := p.limits(v, "default")
			c.Default = &l
		default:
			p.errorf(k, "unknown key %q (want namespaces or default)", k.Value)
		}
	}
	return c
}

func (p *parser) rules(n *yaml.Node) []Rule {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "namespaces must be a mapping of id patterns to limits")
		return nil
	}
	var rules []Rule
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "a pattern must be a string")
			continue
		}
		pat := k.Value
		switch {
		case pat == "":
			p.errorf(k, "empty pattern")
			continue
		case len(pat) > maxPatternLen:
			p.errorf(k, "pattern of %d bytes, at most %d", len(pat), maxPatternLen)
			continue
		}
		if line, dup := seen[pat]; dup {
			p.errorf(k, "pattern %q given twice (first on line %d)", pat, line)
			continue
		}
		seen[pat] = k.Line
		rules = append(rules, Rule{Pattern: pat, Limits: p.limits(v, strconv.Quote(pat)), Line: k.Line})
	}
	return rules
}

func (p *parser) limits(n *yaml.Node, what string) Limits {
	var l Limits
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s: want a mapping with max_keys and/or max_hash_fields", what)
		return l
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			p.errorf(k, "%s: %q given twice", what, k.Value)
			continue
		}
		seen[k.Value] = true
		var dst *int64
		switch k.Value {
		case "max_keys":
			dst = &l.MaxKeys
		case "max_hash_fields":
			dst = &l.MaxHashFields
		default:
			p.errorf(k, "%s: unknown key %q (want max_keys or max_hash_fields)", what, k.Value)
			continue
		}
		x, err := strconv.ParseInt(v.Value, 10, 64)
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || err != nil || x < 1 {
			p.errorf(v, "%s: %s must be a positive integer, not %q", what, k.Value, v.Value)
			continue
		}
		*dst = x
	}
	return l
}
