package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrConfigFile is returned for a --config file that cannot be read or
// names a setting counterd does not have.
var ErrConfigFile = errors.New("config file")

// maxConfigFile bounds what --config reads: a configuration is a few
// kilobytes; anything near this is not one.
const maxConfigFile = 1 << 20

// ApplyConfigFile sets, from the YAML file at path, every flag of fs that
// neither the command line nor the environment set: the precedence is
// flag > environment > file > default (docs/operations.md, "Configuration").
// Keys are flag names (`http: 127.0.0.1:8080`, `peer-regions: r2=h:9090`);
// a value is a scalar, or a list of scalars for a comma-separated flag.
// Every error in the file is reported at once, each with its line; nothing
// is applied unless the whole file is valid.
func ApplyConfigFile(fs *flag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfigFile, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrConfigFile, path, err)
	}
	if len(data) > maxConfigFile {
		return fmt.Errorf("%w: %s: larger than %d bytes", ErrConfigFile, path, maxConfigFile)
	}
	settings, err := parseConfigFile(data, fs)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrConfigFile, path, err)
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	var (
		errs []error
		prev = map[string]string{} // to undo: a flag's Set may store a zero value on a parse error
	)
	for _, s := range settings {
		if onCommandLine[s.name] {
			continue
		}
		if _, inEnv := os.LookupEnv(envName(s.name)); inEnv {
			continue
		}
		prev[s.name] = fs.Lookup(s.name).Value.String()
		if err := fs.Set(s.name, s.value); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %s: %v", s.line, s.name, err))
		}
	}
	if len(errs) > 0 {
		for name, v := range prev {
			_ = fs.Lookup(name).Value.Set(v) // the value it held before, which parsed
		}
		return fmt.Errorf("%w: %s: %w", ErrConfigFile, path, errors.Join(errs...))
	}
	return nil
}

// configSetting is one key of a --config file.
type configSetting struct {
	name, value string
	line        int
}

// notInConfigFile are flags a file cannot set: --config names the file,
// --version is a command, not a setting.
var notInConfigFile = map[string]bool{"config": true, "version": true}

// parseConfigFile checks the whole document and returns its settings in
// file order. Values are checked against each flag's parser only by
// ApplyConfigFile (fs.Set), so parseConfigFile never changes fs.
func parseConfigFile(data []byte, fs *flag.FlagSet) ([]configSetting, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind == 0 || len(doc.Content) == 0 { // empty file: nothing to set
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the file must be a mapping of flag names to values", root.Line)
	}
	var (
		out  []configSetting
		errs []error
		seen = map[string]int{}
	)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := strings.TrimLeft(k.Value, "-")
		switch {
		case k.Kind != yaml.ScalarNode:
			errs = append(errs, fmt.Errorf("line %d: a key must be a flag name", k.Line))
			continue
		case notInConfigFile[name]:
			errs = append(errs, fmt.Errorf("line %d: %q cannot be set in a config file", k.Line, k.Value))
			continue
		case fs.Lookup(name) == nil:
			errs = append(errs, fmt.Errorf("line %d: unknown setting %q%s", k.Line, k.Value, suggestFlag(fs, name)))
			continue
		}
		if first, dup := seen[name]; dup {
			errs = append(errs, fmt.Errorf("line %d: %q is already set on line %d", k.Line, name, first))
			continue
		}
		seen[name] = k.Line
		value, err := configValue(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %s: %v", v.Line, name, err))
			continue
		}
		out = append(out, configSetting{name: name, value: value, line: v.Line})
	}
	return out, errors.Join(errs...)
}

// configValue is a node's value as the flag's text: a scalar as written,
// a list of scalars joined with commas.
func configValue(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil
		}
		return v.Value, nil
	case yaml.SequenceNode:
		items := make([]string, 0, len(v.Content))
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return "", errors.New("a list may only hold plain values")
			}
			if strings.Contains(it.Value, ",") {
				return "", fmt.Errorf("list item %q contains a comma", it.Value)
			}
			items = append(items, it.Value)
		}
		return strings.Join(items, ","), nil
	case yaml.AliasNode:
		return "", errors.New("aliases are not supported")
	}
	return "", errors.New("the value must be a plain value or a list")
}
