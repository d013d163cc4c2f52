package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.yaml.in/yaml/v3"
)

// TestAlertRules runs promtool on the alert rules (syntax and PromQL),
// on their unit tests (each alert fires on its series and not on healthy
// ones) and on the example Prometheus configuration.
func TestAlertRules(t *testing.T) {
	promtool := needTool(t, "promtool", "prometheus")
	run(t, "prometheus", promtool, "check", "rules", "alerts.yml")
	run(t, "prometheus", promtool, "test", "rules", "alerts_test.yml")
	run(t, "prometheus", promtool, "check", "config", "prometheus.yml")
}

// TestDashboardQueries checks every query of the Grafana dashboard with
// promtool, as recording rules (Grafana's variables replaced by values).
func TestDashboardQueries(t *testing.T) {
	exprs := dashboardExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("dashboard has %d queries: did it lose its panels?", len(exprs))
	}
	promtool := needTool(t, "promtool", "prometheus")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		e = strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(e)
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: e})
	}
	doc := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ".", promtool, "check", "rules", f)
}

// TestMonitoredMetricsAreRegistered: every metric the alert rules and the
// dashboard query is one counterd registers: a counterd_* name given to a
// collector (prometheus *Opts{Name: ...} or NewDesc) in the non-test Go
// code, a go_* or process_* metric of the Go and process collectors the
// server registers, or Prometheus's own "up".
func TestMonitoredMetricsAreRegistered(t *testing.T) {
	registered := registeredCounterdMetrics(t)
	if len(registered) < 25 {
		t.Fatalf("found only %d counterd metrics in the code: %v", len(registered), registered)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		registered[mf.GetName()] = true
	}
	registered["up"] = true

	var exprs []string
	for _, r := range alertRules(t) {
		exprs = append(exprs, r.Expr)
	}
	exprs = append(exprs, dashboardExprs(t)...)
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricNames(e) {
			used[name] = true
		}
	}
	for _, want := range []string{"up", "counterd_cluster_replication_lag_seconds", "counterd_shed_requests_total", "counterd_engine_flush_failures_total"} {
		if !used[want] {
			t.Errorf("no alert or panel uses %s", want)
		}
	}
	for name := range used {
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suf); ok && registered[b] {
				base = b
			}
		}
		if !registered[base] {
			t.Errorf("%s is queried by deploy/ but counterd registers no such metric", name)
		}
	}
}

type alertRule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range doc.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) < 5 {
		t.Fatalf("alerts.yml has %d rules", len(out))
	}
	return out
}

// dashboardExprs returns the query of every panel target.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("grafana/counterd.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has a target without a query", p.Title)
			}
			out = append(out, tg.Expr)
		}
	}
	return out
}

var (
	// identRE finds PromQL identifiers; metricNames keeps the metric ones.
	identRE  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	strLitRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	braceRE  = regexp.MustCompile(`\{[^{}]*\}`)
	groupRE  = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	rangeRE  = regexp.MustCompile(`\[[^\]]*\]`)
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left once label matchers, grouping clauses, ranges, strings
// and function names and keywords are removed.
func metricNames(expr string) []string {
	e := strLitRE.ReplaceAllString(expr, `""`)
	e = braceRE.ReplaceAllString(e, " ")
	e = groupRE.ReplaceAllString(e, " ")
	e = rangeRE.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range identRE.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promqlKeywords[id] {
			continue // a function call or an operator keyword
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}

// registeredCounterdMetrics scans the module's non-test Go files for the
// names given to collectors: Name fields of prometheus.*Opts literals and
// the first argument of prometheus.NewDesc.
func registeredCounterdMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".git" || n == "testdata" || n == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(src, []byte("prometheus.")) {
			return nil // registers nothing (and parsing it is slow under -race)
		}
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !isPkg(sel.X, "prometheus") || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Name") {
						if s, ok := stringLit(kv.Value); ok {
							out[s] = true
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if ok && isPkg(sel.X, "prometheus") && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
					if s, ok := stringLit(n.Args[0]); ok {
						out[s] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isPkg(x ast.Expr, name string) bool   { return isIdent(x, name) }
func isIdent(x ast.Expr, name string) bool { id, ok := x.(*ast.Ident); return ok && id.Name == name }

func stringLit(x ast.Expr) (string, bool) {
	bl, ok := x.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// TestMetricNames checks the PromQL name extraction the test above
// relies on.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`up{job="counterd"} == 0`: {"up"},
		`sum by (instance, front_end) (rate(counterd_shed_requests_total[5m])) > 1`:                                  {"counterd_shed_requests_total"},
		`histogram_quantile(0.99, sum by (le, op) (rate(counterd_http_request_duration_seconds_bucket{a="b"}[5m])))`: {"counterd_http_request_duration_seconds_bucket"},
		`(time() - x_seconds > 60) and y_keys > 0`:                                                                   {"x_seconds", "y_keys"},
		`max without (instance, pod) (m{state="dead, or"}) > 0`:                                                      {"m"},
		`rate(a[5m]) > 0 or rate(b[5m]) > 0`:                                                                         {"a", "b"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %v, want %v", expr, got, want)
		}
	}
}

// TestDashboardGenerated: grafana/counterd.json is what gen_dashboard.py
// writes (edit the script, not the JSON).
func TestDashboardGenerated(t *testing.T) {
	python := needTool(t, "python3", "python3")
	dir := t.TempDir()
	src, err := os.ReadFile("grafana/gen_dashboard.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gen_dashboard.py"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, python, "gen_dashboard.py")
	got, err := os.ReadFile(filepath.Join(dir, "counterd.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("grafana/counterd.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("deploy/grafana/counterd.json is stale: run python3 gen_dashboard.py in deploy/grafana")
	}
}
