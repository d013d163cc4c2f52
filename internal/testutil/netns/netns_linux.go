//go:build linux

package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// EnvRequireServices set to 1 makes New fail, instead of skip, when it runs
// as root and still cannot build the network.
const EnvRequireServices = "COUNTERD_REQUIRE_SERVICES"

// Network is a bridge plus one namespace per node. Its methods are safe for
// concurrent use; the t.Cleanup registered by New deletes it.
type Network struct {
	prefix string   // "10.201.X.": node i is prefix+(i+1), the bridge prefix+254
	tag    string   // "cn<pid36>_<n>": prefix of every name New made
	ns     []string // namespace names by node index

	mu   sync.Mutex      // guards cuts
	cuts map[[2]int]bool // a prohibit route in the namespace of [0] for the address of [1]
}

var (
	runs    atomic.Int64
	subnets sync.Mutex // serialises choosing and claiming a /24 within this process
	nameRE  = regexp.MustCompile(`^cn([0-9a-z]+)_[0-9]+[bvpn][0-9]*$`)
)

// New builds a network of n nodes (1..250) for t, as the package comment
// describes, or skips t when this machine cannot.
func New(t testing.TB, n int) *Network {
	t.Helper()
	if n < 1 || n > 250 {
		panic(fmt.Sprintf("netns: %d nodes: want 1..250", n))
	}
	if err := probe(); err != nil {
		if os.Geteuid() == 0 && os.Getenv(EnvRequireServices) == "1" {
			t.Fatalf("netns: network namespaces unavailable although %s=1: %v", EnvRequireServices, err)
		}
		t.Skipf("netns: network namespaces unavailable (need Linux, root and iproute2's ip): %v", err)
	}
	removeLeftovers(t)
	nw := &Network{
		tag:  fmt.Sprintf("cn%s_%d", strconv.FormatInt(int64(os.Getpid()), 36), runs.Add(1)%100),
		cuts: map[[2]int]bool{},
	}
	t.Cleanup(func() {
		if err := nw.remove(); err != nil {
			t.Errorf("netns: cleanup: %v", err)
		}
	})
	if err := nw.create(n); err != nil {
		t.Fatalf("netns: %v", err)
	}
	return nw
}

// probe checks that this process may create a namespace.
func probe() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return err
	}
	name := fmt.Sprintf("cn%s_0n", strconv.FormatInt(int64(os.Getpid()), 36))
	if err := ip("netns", "add", name); err != nil {
		return err
	}
	return ip("netns", "del", name)
}

// ip runs the ip command; its error includes what ip printed.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func ipOutput(args ...string) string {
	out, _ := exec.Command("ip", args...).Output()
	return string(out)
}

// removeLeftovers deletes namespaces and links named by a run whose process
// is gone (a test binary killed before its cleanup ran).
func removeLeftovers(t testing.TB) {
	stale := func(name string) bool {
		m := nameRE.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.ParseInt(m[1], 36, 64)
		return err == nil && pid != int64(os.Getpid()) && errors.Is(syscall.Kill(int(pid), 0), syscall.ESRCH)
	}
	for _, line := range strings.Split(ipOutput("netns", "list"), "\n") {
		if f := strings.Fields(line); len(f) > 0 && stale(f[0]) {
			t.Logf("netns: removing namespace %s left by an earlier run: %v", f[0], ip("netns", "del", f[0]))
		}
	}
	for _, line := range strings.Split(ipOutput("-o", "link", "show"), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if stale(name) {
			t.Logf("netns: removing link %s left by an earlier run: %v", name, ip("link", "del", name))
		}
	}
}

func (nw *Network) bridge() string        { return nw.tag + "b" }
func (nw *Network) hostVeth(i int) string { return nw.tag + "v" + strconv.Itoa(i+1) }

func (nw *Network) create(n int) error {
	subnets.Lock()
	defer subnets.Unlock()
	used := ipOutput("-o", "-4", "addr", "show")
	for x := 1; x <= 250 && nw.prefix == ""; x++ {
		if p := fmt.Sprintf("10.201.%d.", x); !strings.Contains(used, " "+p) {
			nw.prefix = p
		}
	}
	if nw.prefix == "" {
		return errors.New("no free /24 in 10.201.0.0/16")
	}
	br := nw.bridge()
	steps := [][]string{
		{"link", "add", br, "type", "bridge"},
		{"addr", "add", nw.prefix + "254/24", "dev", br},
		{"link", "set", br, "up"},
	}
	for i := range n {
		ns, host, peer := nw.tag+"n"+strconv.Itoa(i+1), nw.hostVeth(i), nw.tag+"p"+strconv.Itoa(i+1)
		nw.ns = append(nw.ns, ns)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "netns", ns},
			[]string{"link", "set", host, "master", br},
			[]string{"link", "set", host, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "addr", "add", nw.IP(i) + "/24", "dev", peer},
			[]string{"-n", ns, "link", "set", peer, "up"},
		)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes every namespace and link of nw; it tolerates parts that
// were never made.
func (nw *Network) remove() error {
	var errs []error
	for i, ns := range nw.ns {
		if err := ip("netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
		_ = ip("link", "del", nw.hostVeth(i)) // usually gone with its peer
	}
	if strings.Contains(ipOutput("-o", "link", "show"), " "+nw.bridge()+":") {
		errs = append(errs, ip("link", "del", nw.bridge()))
	}
	return errors.Join(errs...)
}

// IP is the address of node i (from 0).
func (nw *Network) IP(i int) string { return nw.prefix + strconv.Itoa(i+1) }

// HostIP is the bridge's address: where the test process's packets come from.
func (nw *Network) HostIP() string { return nw.prefix + "254" }

// Command prepares name with args to run in node i's namespace. The program
// is killed if the test process dies.
func (nw *Network) Command(i int, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", nw.ns[i], name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Partition cuts every node of a off from every node of b, in both
// directions. Both groups still reach the test process and their own group.
func (nw *Network) Partition(a, b []int) error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for _, i := range a {
		for _, j := range b {
			for _, c := range [][2]int{{i, j}, {j, i}} {
				if nw.cuts[c] {
					continue
				}
				if err := ip("-n", nw.ns[c[0]], "route", "add", "prohibit", nw.IP(c[1])+"/32"); err != nil {
					return err
				}
				nw.cuts[c] = true
			}
		}
	}
	return nil
}

// Delay adds d to every packet node i sends (tc netem on the namespace's
// end of its veth pair), so a link between two nodes takes 2d both ways.
// It fails on a kernel without the netem qdisc (sch_netem).
func (nw *Network) Delay(i int, d time.Duration) error {
	out, err := exec.Command("ip", "netns", "exec", nw.ns[i], "tc", "qdisc", "replace", "dev",
		nw.tag+"p"+strconv.Itoa(i+1), "root", "netem", "delay", strconv.FormatInt(d.Microseconds(), 10)+"us").CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc netem in %s: %v: %s", nw.ns[i], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Heal removes every cut Partition made.
func (nw *Network) Heal() error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	var errs []error
	for c := range nw.cuts {
		if err := ip("-n", nw.ns[c[0]], "route", "del", "prohibit", nw.IP(c[1])+"/32"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(nw.cuts, c)
	}
	return errors.Join(errs...)
}
