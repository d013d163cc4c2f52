package deploy

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// k8sObjects parses every YAML document of deploy/k8s/*.yaml (but the
// kustomization) into generic maps.
func k8sObjects(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/k8s: %v", err)
	}
	objs := map[string]map[string]any{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o map[string]any
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o == nil {
				continue
			}
			for _, k := range []string{"apiVersion", "kind", "metadata"} {
				if o[k] == nil {
					t.Errorf("%s: object without %s", f, k)
				}
			}
			key := str(o, "kind") + "/" + str(o, "metadata", "name")
			if _, dup := objs[key]; dup {
				t.Errorf("%s defined twice", key)
			}
			objs[key] = o
		}
	}
	return objs
}

// get walks m by keys (string keys of maps, or an int index of a list).
func get(m any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, ok := m.(map[string]any)
			if !ok {
				return nil
			}
			m = mm[k]
		case int:
			l, ok := m.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			m = l[k]
		}
	}
	return m
}

func str(m any, path ...any) string { s, _ := get(m, path...).(string); return s }

// TestKubernetesManifests checks the objects and the fields a working
// counterd cluster needs: a headless governing Service published before
// readiness, a StatefulSet started in parallel with readiness on
// /readyz, named ports that the Services target, a data volume, the
// tokens Secret mounted where --auth reads it, and a PodDisruptionBudget
// selecting the pods.
func TestKubernetesManifests(t *testing.T) {
	objs := k8sObjects(t)
	sts := objs["StatefulSet/counterd"]
	peers := objs["Service/counterd-peers"]
	svc := objs["Service/counterd"]
	pdb := objs["PodDisruptionBudget/counterd"]
	if sts == nil || peers == nil || svc == nil || pdb == nil {
		t.Fatalf("want StatefulSet/counterd, Service/counterd-peers, Service/counterd, PodDisruptionBudget/counterd; have %v", keys(objs))
	}
	if str(sts, "apiVersion") != "apps/v1" || str(pdb, "apiVersion") != "policy/v1" {
		t.Errorf("apiVersions: StatefulSet %s, PodDisruptionBudget %s", str(sts, "apiVersion"), str(pdb, "apiVersion"))
	}
	if str(sts, "spec", "serviceName") != "counterd-peers" || str(peers, "spec", "clusterIP") != "None" {
		t.Errorf("StatefulSet serviceName %q, counterd-peers clusterIP %q: want the headless counterd-peers", str(sts, "spec", "serviceName"), str(peers, "spec", "clusterIP"))
	}
	if get(peers, "spec", "publishNotReadyAddresses") != true {
		t.Error("counterd-peers must publish not-ready addresses: nodes are not ready until they have met a peer")
	}
	if str(sts, "spec", "podManagementPolicy") != "Parallel" {
		t.Error("StatefulSet must start pods in parallel (OrderedReady would wait forever for pod 0 to be ready alone)")
	}
	labels, _ := get(sts, "spec", "template", "metadata", "labels").(map[string]any)
	for name, sel := range map[string]any{
		"StatefulSet":         get(sts, "spec", "selector", "matchLabels"),
		"PodDisruptionBudget": get(pdb, "spec", "selector", "matchLabels"),
		"counterd-peers":      get(peers, "spec", "selector"),
		"counterd":            get(svc, "spec", "selector"),
	} {
		m, _ := sel.(map[string]any)
		if len(m) == 0 {
			t.Errorf("%s has no selector", name)
		}
		for k, v := range m {
			if labels[k] != v {
				t.Errorf("%s selects %s=%v, which the pod template does not carry", name, k, v)
			}
		}
	}
	if get(pdb, "spec", "maxUnavailable") == nil && get(pdb, "spec", "minAvailable") == nil {
		t.Error("PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}

	c := get(sts, "spec", "template", "spec", "containers", 0)
	if c == nil {
		t.Fatal("StatefulSet has no container")
	}
	if str(c, "readinessProbe", "httpGet", "path") != "/readyz" || str(c, "livenessProbe", "httpGet", "path") != "/healthz" {
		t.Errorf("probes: readiness %q, liveness %q; want /readyz and /healthz", str(c, "readinessProbe", "httpGet", "path"), str(c, "livenessProbe", "httpGet", "path"))
	}
	ports := map[string]bool{}
	for _, p := range get(c, "ports").([]any) {
		ports[str(p, "name")] = true
	}
	for _, s := range []map[string]any{peers, svc} {
		for _, p := range get(s, "spec", "ports").([]any) {
			if tp := str(p, "targetPort"); !ports[tp] {
				t.Errorf("Service %s targets port %q, which the container does not name", str(s, "metadata", "name"), tp)
			}
		}
	}
	if str(c, "readinessProbe", "httpGet", "port") != "http" || !ports["http"] || !ports["gossip-udp"] || !ports["grpc"] {
		t.Errorf("container ports %v: want http (probed), grpc and gossip", ports)
	}
	env := map[string]string{}
	for _, e := range get(c, "env").([]any) {
		env[str(e, "name")] = str(e, "value")
	}
	for _, k := range []string{"COUNTERD_NODE_ID", "COUNTERD_JOIN", "COUNTERD_GOSSIP", "COUNTERD_GRPC", "COUNTERD_HTTP", "COUNTERD_DATA"} {
		if env[k] == "" {
			t.Errorf("container sets no %s", k)
		}
	}
	replicas, _ := get(sts, "spec", "replicas").(int)
	for i := 0; i < replicas; i++ {
		if want := "counterd-" + string(rune('0'+i)) + ".counterd-peers."; !strings.Contains(env["COUNTERD_JOIN"], want) {
			t.Errorf("COUNTERD_JOIN %q does not name pod %d (%s...)", env["COUNTERD_JOIN"], i, want)
		}
	}
	mounts := map[string]string{}
	for _, m := range get(c, "volumeMounts").([]any) {
		mounts[str(m, "name")] = str(m, "mountPath")
	}
	if mounts["data"] != env["COUNTERD_DATA"] || str(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name") != "data" {
		t.Errorf("data volume mounted at %q, COUNTERD_DATA %q, claim template %q", mounts["data"], env["COUNTERD_DATA"], str(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name"))
	}
	args, _ := get(c, "args").([]any)
	if len(args) != 2 || args[0] != "--auth" || !strings.HasPrefix(args[1].(string), mounts["tokens"]+"/") ||
		str(sts, "spec", "template", "spec", "volumes", 0, "secret", "secretName") == "" {
		t.Errorf("args %v, tokens mounted at %q: want --auth reading the mounted Secret", args, mounts["tokens"])
	}
}

// TestKustomize renders deploy/k8s with kubectl when it is installed (it
// is not part of CI's dependencies).
func TestKustomize(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed; TestKubernetesManifests checked the files")
	}
	out := run(t, ".", kubectl, "kustomize", "k8s")
	for _, want := range []string{"kind: StatefulSet", "kind: PodDisruptionBudget", "name: counterd-peers"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl kustomize output lacks %q", want)
		}
	}
}

// TestSystemdUnit runs systemd-analyze verify on the unit, with
// ExecStart pointed at an existing binary (verify checks it is there).
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("systemd/counterd.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/local/bin/counterd\n", "StateDirectory=counterd\n", "Environment=COUNTERD_DATA=/var/lib/counterd\n", "[Install]\n"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("unit lacks %q", want)
		}
	}
	sa := needTool(t, "systemd-analyze", "systemd")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "counterd.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(b, []byte("/usr/local/bin/counterd"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sa, "verify", unit)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestLicense: LICENSE is the full Apache License 2.0.
func TestLicense(t *testing.T) {
	b, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
		"9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS", "APPENDIX: How to apply the Apache License to your work."} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("LICENSE lacks %q", want)
		}
	}
}

// TestImageContext runs scripts/image-context.sh and checks the context
// it makes against the Dockerfile: FROM scratch only (nothing to pull),
// every COPY source present, static binaries (no ELF interpreter, no
// dynamic section) that report the stamped version, and a CA bundle of
// parseable certificates. With a Docker daemon it also builds the image.
//
// The static build recompiles every dependency with CGO_ENABLED=0 (about
// 2.5 CPU minutes with a cold cache), so it runs only with
// COUNTERD_TEST_IMAGE=1: .ci/run sets it in its own step after make test.
func TestImageContext(t *testing.T) {
	if os.Getenv("COUNTERD_TEST_IMAGE") != "1" {
		t.Skip("set COUNTERD_TEST_IMAGE=1 to build the static binaries (.ci/run does)")
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err != nil {
		t.Fatal("no CA bundle on this machine (Debian package ca-certificates)")
	}
	sources := dockerfileSources(t)
	dir := t.TempDir()
	cmd := exec.Command("../scripts/image-context.sh", dir)
	cmd.Env = append(os.Environ(), "VERSION=v1.2.3-imagetest")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("image-context.sh: %v\n%s", err, out)
	}
	for _, s := range sources {
		if _, err := os.Stat(filepath.Join(dir, s)); err != nil {
			t.Errorf("COPY %s: not in the context: %v", s, err)
		}
	}
	for _, bin := range []string{"counterd", "counterctl"} {
		p := filepath.Join(dir, bin)
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked (%v)", bin, prog.Type)
			}
		}
		f.Close()
		if err := checkLean(p); err != nil {
			t.Errorf("%s: %v", bin, err)
		}
		out, err := exec.Command(p, "--version").CombinedOutput()
		if err != nil || string(out) != bin+" v1.2.3-imagetest\n" {
			t.Errorf("%s --version: %q, %v", bin, out, err)
		}
	}
	pemBytes, err := os.ReadFile(filepath.Join(dir, "ca-certificates.crt"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		var blk *pem.Block
		blk, pemBytes = pem.Decode(pemBytes)
		if blk == nil {
			break
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err == nil {
			n++
		}
	}
	if n < 10 {
		t.Errorf("CA bundle holds %d certificates", n)
	}
	if docker, err := exec.LookPath("docker"); err == nil && exec.Command(docker, "info").Run() == nil {
		run(t, dir, docker, "build", "-q", "-t", "counterd:imagetest", ".")
		out := run(t, dir, docker, "run", "--rm", "counterd:imagetest", "--version")
		if out != "counterd v1.2.3-imagetest\n" {
			t.Errorf("docker run counterd:imagetest --version: %q", out)
		}
	} else {
		t.Log("no Docker daemon: the context was checked, the image not built")
	}
}

// TestDockerfile checks the Dockerfile without building: FROM scratch
// only, the files it copies, a non-root user and counterd as entry point.
func TestDockerfile(t *testing.T) {
	sources := dockerfileSources(t)
	for _, want := range []string{"counterd", "counterctl", "ca-certificates.crt", "data"} {
		if !slices.Contains(sources, want) {
			t.Errorf("Dockerfile does not copy %s (copies %v)", want, sources)
		}
	}
	df, _ := os.ReadFile("../Dockerfile")
	for _, want := range []string{"\nUSER 65532:65532\n", "\nENTRYPOINT [\"/usr/local/bin/counterd\"]\n", "\nVOLUME [\"/data\"]\n"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("Dockerfile lacks %q", strings.TrimSpace(want))
		}
	}
}

// dockerfileSources returns the sources of the Dockerfile's COPY lines,
// failing t unless every FROM is scratch (nothing to pull).
func dockerfileSources(t *testing.T) []string {
	t.Helper()
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	from := 0
	sc := bufio.NewScanner(bytes.NewReader(df))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			from++
			if len(f) != 2 || f[1] != "scratch" {
				t.Errorf("Dockerfile: %q: the image must start FROM scratch (no base image to pull)", sc.Text())
			}
		case "COPY":
			args := f[1:]
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				args = args[1:]
			}
			if len(args) < 2 {
				t.Fatalf("Dockerfile: %q", sc.Text())
			}
			sources = append(sources, args[:len(args)-1]...)
		}
	}
	if from != 1 || len(sources) < 3 {
		t.Fatalf("Dockerfile: %d FROM lines, copies %v", from, sources)
	}
	return sources
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// maxReleaseBytes bounds a release counterd (issue 24: at most 40 MB).
const maxReleaseBytes = 40_000_000

// forbiddenModules are module path prefixes a release binary must not
// link: test, browser, plotting and documentation tools, which only tests,
// scripts/benchreport and go generate use, and Envoy's go-control-plane
// (with cncf/xds and protoc-gen-validate), whose client the rate limit
// service's tests call it with, and goose, which the PostgreSQL store's
// tests compare its migrations with (docs/deploy.md, "Building").
var forbiddenModules = []string{
	"github.com/chromedp/", "gonum.org/", "codeberg.org/go-fonts/", "codeberg.org/go-latex/",
	"codeberg.org/go-pdf/", "git.sr.ht/~sbinet/", "github.com/ajstarks/svgo", "github.com/golang/freetype",
	"golang.org/x/image", "github.com/getkin/kin-openapi", "github.com/campoy/embedmd",
	"go.uber.org/goleak", "pgregory.net/rapid", "github.com/stretchr/testify",
	"github.com/twmb/franz-go/pkg/kfake",
	"github.com/envoyproxy/", "github.com/cncf/xds/", "github.com/pressly/goose/",
}

// TestReleaseBinary checks the binary COUNTERD_RELEASE_BIN (make
// check-lean sets it to bin/counterd after make build) as checkLean does:
// a release build, at most maxReleaseBytes, no forbidden module.
func TestReleaseBinary(t *testing.T) {
	p := os.Getenv("COUNTERD_RELEASE_BIN")
	if p == "" {
		t.Skip("set COUNTERD_RELEASE_BIN to a release counterd (make check-lean does)")
	}
	if err := checkLean(p); err != nil {
		t.Error(err)
	}
}

// checkLean reports how the binary at path differs from a release build
// (make build, scripts/image-context.sh): stripped of its symbol table and
// DWARF, built with -trimpath, -tags grpcnotrace,nethttpomithttp2 and CGO_ENABLED=0, at most
// maxReleaseBytes, linking no forbiddenModules.
func checkLean(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size() > maxReleaseBytes {
		return fmt.Errorf("%d bytes, over the %d of a release binary (docs/deploy.md, \"Building\")", st.Size(), maxReleaseBytes)
	}
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, name := range []string{".symtab", ".debug_info", ".zdebug_info"} {
		if f.Section(name) != nil {
			return fmt.Errorf("has a %s section: not built with -ldflags '-s -w'", name)
		}
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return err
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" {
		return errors.New("not built with -trimpath")
	}
	for _, tag := range []string{"grpcnotrace", "nethttpomithttp2"} {
		if !slices.Contains(strings.Split(settings["-tags"], ","), tag) {
			return fmt.Errorf("built with tags %q, without %s", settings["-tags"], tag)
		}
	}
	if settings["CGO_ENABLED"] != "0" {
		return fmt.Errorf("built with CGO_ENABLED=%q, not 0", settings["CGO_ENABLED"])
	}
	var bad []string
	for _, d := range bi.Deps {
		for _, f := range forbiddenModules {
			if strings.HasPrefix(d.Path, f) {
				bad = append(bad, d.Path)
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("links %v: test, browser or plotting modules stay out of release binaries", bad)
	}
	return nil
}
