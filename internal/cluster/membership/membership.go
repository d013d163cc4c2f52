// Package membership is counterd's cluster membership and failure detection:
// a thin wrapper over hashicorp/memberlist (SWIM gossip).
//
// A node starts with Start, which binds the gossip address (--gossip) and
// joins the given peers (--join). Members reports every node this node has
// heard of, with its state; OnEvent (Config) receives join, leave and update
// events one at a time, in the order the changes were applied.
//
// States: memberlist v0.7.0 does not expose its internal "suspect" state, so a
// member is alive until it is declared dead (failed probes and suspicion
// timeout) or left (it called Leave). Dead vs left is told apart with a small
// direct message ("leave intent") that Leave sends to every alive member
// before memberlist's own leave broadcast; if the intent arrives after the
// node was declared dead, the member moves from dead to left (an EventUpdate).
//
// Security: SecretKey encrypts all gossip (memberlist's keyring), and Admit
// holds each new member back from Members and events until it is vetted
// (admit.go; counterd checks its peer certificate).
package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Defaults applied to zero Config fields. The timing defaults are
// memberlist's DefaultLANConfig.
const (
	DefaultBindAddr         = "127.0.0.1:7946"
	DefaultProbeInterval    = time.Second
	DefaultProbeTimeout     = 500 * time.Millisecond
	DefaultGossipInterval   = 200 * time.Millisecond
	DefaultPushPullInterval = 30 * time.Second
	DefaultSuspicionMult    = 4
	DefaultTCPTimeout       = 10 * time.Second
	// DefaultDeadRetention: how long a dead or left member stays in memberlist's
	// table (and is still gossiped about) before it is forgotten there.
	DefaultDeadRetention = 30 * time.Second
	DefaultAdmitRetry    = time.Second
	// MaxMetaSize is memberlist's limit on node metadata.
	MaxMetaSize = memberlist.MetaMaxSize
)

// Config configures a member. Only NodeID is usually set in tests; production
// sets NodeID, BindAddr, Join and Meta from flags.
type Config struct {
	// NodeID is this node's unique name in the cluster (--node-id). Default:
	// the hostname.
	NodeID string
	// BindAddr is the gossip address, host:port (--gossip), used for both UDP
	// and TCP. Default 127.0.0.1:7946. Port 0 picks a free port (tests); Addr
	// reports the port chosen.
	BindAddr string
	// AdvertiseAddr is the host:port other nodes should use to reach this one,
	// when it differs from BindAddr (NAT, 0.0.0.0 binds). Optional.
	AdvertiseAddr string
	// Join lists gossip addresses of existing members (--join). Start fails if
	// none can be contacted; an empty list starts a new cluster.
	Join []string
	// Meta is opaque node metadata gossiped with membership, e.g. small JSON
	// with the node's HTTP and gRPC addresses. At most MaxMetaSize bytes;
	// change it later with SetMeta.
	Meta []byte
	// Logger receives memberlist's logs (level parsed from its "[LEVEL]"
	// prefix). Default slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called for every membership change, one call at a
	// time and in order, from a dedicated goroutine (it may block without
	// stalling gossip; events queue up meanwhile). It must not call Shutdown.
	OnEvent func(Event)

	// Failure detection and gossip timing (memberlist names). Zero means the
	// LAN default. A failed node is declared dead after roughly
	// ProbeInterval + SuspicionMult*log10(N)*ProbeInterval.
	ProbeInterval    time.Duration
	ProbeTimeout     time.Duration
	GossipInterval   time.Duration
	PushPullInterval time.Duration
	SuspicionMult    int
	TCPTimeout       time.Duration
	// SecretKey, when set, encrypts and authenticates all gossip with
	// AES-GCM (memberlist SecretKey): 16, 24 or 32 bytes. A node without
	// the same key can neither join nor be heard. Default: plaintext.
	SecretKey []byte

	// Admit, when set, vets every other member before it is reported
	// (admit.go): until Admit returns nil for the member's current
	// address and Meta, the member gets no event and is not in Members or
	// Alive. It runs on its own goroutine, with a context cancelled by
	// Shutdown, and is retried every AdmitRetry while the member stays in
	// the gossip. Default: every member is admitted.
	Admit      func(context.Context, Member) error
	AdmitRetry time.Duration // default DefaultAdmitRetry

	// ForgetFile, when set, keeps the forgotten ids (forget.go) across
	// restarts: read by Start, rewritten (atomically, fsynced) on every
	// change. Default: memory only.
	ForgetFile string

	// DeadRetention (memberlist GossipToTheDeadTime and DeadNodeReclaimTime):
	// how long memberlist keeps gossiping about a dead node, and after which a
	// node of the same name may come back from another address.
	DeadRetention time.Duration
}

func (c Config) withDefaults() Config {
	if c.NodeID == "" {
		c.NodeID, _ = os.Hostname()
	}
	if c.BindAddr == "" {
		c.BindAddr = DefaultBindAddr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&c.ProbeInterval, DefaultProbeInterval)
	setDur(&c.ProbeTimeout, DefaultProbeTimeout)
	setDur(&c.GossipInterval, DefaultGossipInterval)
	setDur(&c.PushPullInterval, DefaultPushPullInterval)
	setDur(&c.TCPTimeout, DefaultTCPTimeout)
	setDur(&c.DeadRetention, DefaultDeadRetention)
	setDur(&c.AdmitRetry, DefaultAdmitRetry)
	if c.SuspicionMult == 0 {
		c.SuspicionMult = DefaultSuspicionMult
	}
	return c
}

// Validate reports whether c (after defaults) is usable.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.NodeID == "" {
		return errors.New("membership: NodeID is empty and the hostname is unknown")
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		return fmt.Errorf("membership: BindAddr: %w", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("membership: AdvertiseAddr: %w", err)
		}
	}
	if len(c.Meta) > MaxMetaSize {
		return fmt.Errorf("membership: Meta is %d bytes, limit %d", len(c.Meta), MaxMetaSize)
	}
	if n := len(c.SecretKey); n != 0 && n != 16 && n != 24 && n != 32 {
		return fmt.Errorf("membership: SecretKey is %d bytes, want 16, 24 or 32", n)
	}
	if c.ProbeInterval < 0 || c.ProbeTimeout < 0 || c.GossipInterval < 0 || c.PushPullInterval < 0 ||
		c.TCPTimeout < 0 || c.DeadRetention < 0 || c.SuspicionMult < 0 {
		return errors.New("membership: negative timing setting")
	}
	if c.ProbeTimeout > c.ProbeInterval {
		return fmt.Errorf("membership: ProbeTimeout %v exceeds ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval)
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}

// State is a member's state as seen by this node.
type State int

const (
	StateAlive State = iota // reachable (possibly suspected: memberlist does not expose suspicion)
	StateDead               // failed probes and suspicion timeout, without leaving
	StateLeft               // called Leave
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Member is one node as seen by this node.
type Member struct {
	ID    string
	Addr  string // gossip address, host:port
	Meta  []byte
	State State
}

// EventType says what changed.
type EventType int

const (
	EventJoin   EventType = iota // a member became alive (first seen, or back after dead/left)
	EventLeave                   // a member became dead or left (see Member.State)
	EventUpdate                  // an alive member's Meta or address changed, or dead became left
	EventForget                  // a member was forgotten (forget.go): it left Members for good
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	case EventForget:
		return "forget"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is one membership change.
type Event struct {
	Type   EventType
	Member Member
}

// ErrShutdown is returned by operations on a Membership after Shutdown.
var ErrShutdown = errors.New("membership: shut down")

// Membership is a running member. Its methods are safe for concurrent use.
type Membership struct {
	cfg Config
	ml  *memberlist.Memberlist

	mu      sync.Mutex
	members map[string]Member
	leaving map[string]bool // leave intents received, by node id
	admit   admission       // members waiting for Config.Admit
	meta    []byte
	queue   []Event
	wake    chan struct{} // 1-buffered; signals the dispatcher
	closed  bool

	shutdownOnce sync.Once
	stop         chan struct{}
	done         chan struct{}

	forgotten   map[string]bool                 // guarded by mu; retired ids (forget.go)
	forgottenRO atomic.Pointer[map[string]bool] // a copy of forgotten for lock-free reads
}

// leaveIntent prefixes the user message a leaving node sends to its peers.
var leaveIntent = []byte("counterd/leave\x00")

// Start creates the member, binds its gossip address and joins cfg.Join.
func Start(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := &Membership{
		cfg:     cfg,
		members: map[string]Member{},
		leaving: map[string]bool{},
		admit:   newAdmission(),
		meta:    slices.Clone(cfg.Meta),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}

	mc := memberlistConfig(cfg)
	mc.Delegate = (*delegate)(m)
	mc.Events = (*events)(m)

	if err := m.loadForgotten(); err != nil {
		return nil, err
	}
	go m.dispatch()
	ml, err := memberlist.Create(mc)
	if err != nil {
		m.stopDispatch()
		return nil, fmt.Errorf("membership: start on %s: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	if len(cfg.Join) > 0 {
		if _, err := ml.Join(cfg.Join); err != nil {
			_ = ml.Shutdown()
			m.stopAdmission()
			m.stopDispatch()
			return nil, fmt.Errorf("membership: join %v: %w", cfg.Join, err)
		}
	}
	return m, nil
}

// ID is this node's id.
func (m *Membership) ID() string { return m.cfg.NodeID }

// Addr is this node's gossip address as advertised to others (with the real
// port when BindAddr asked for port 0).
func (m *Membership) Addr() string {
	n := m.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Join contacts more existing members (for example to retry a failed
// bootstrap). It returns how many were contacted.
func (m *Membership) Join(addrs []string) (int, error) {
	if m.isClosed() {
		return 0, ErrShutdown
	}
	return m.ml.Join(addrs)
}

// Members returns every node this node knows of, sorted by ID, including
// itself and dead or left nodes (until they come back).
func (m *Membership) Members() []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		mem.Meta = slices.Clone(mem.Meta)
		out = append(out, mem)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Alive returns the IDs of the alive members (this node included), sorted:
// the node set for the ring.
func (m *Membership) Alive() []string {
	var ids []string
	for _, mem := range m.Members() {
		if mem.State == StateAlive {
			ids = append(ids, mem.ID)
		}
	}
	return ids
}

// SetMeta replaces this node's metadata and gossips it, waiting up to timeout
// for the update to be sent.
func (m *Membership) SetMeta(meta []byte, timeout time.Duration) error {
	if len(meta) > MaxMetaSize {
		return fmt.Errorf("membership: Meta is %d bytes, limit %d", len(meta), MaxMetaSize)
	}
	if m.isClosed() {
		return ErrShutdown
	}
	m.mu.Lock()
	m.meta = slices.Clone(meta)
	m.mu.Unlock()
	return m.ml.UpdateNode(timeout)
}

// Leave announces that this node is leaving, so others see it as left rather
// than dead, waiting up to timeout in total. The node keeps answering gossip
// until Shutdown; call Shutdown afterwards.
func (m *Membership) Leave(timeout time.Duration) error {
	if m.isClosed() {
		return ErrShutdown
	}
	deadline := time.Now().Add(timeout)
	msg := append(slices.Clone(leaveIntent), m.cfg.NodeID...)
	for _, mem := range m.Members() {
		if mem.ID == m.cfg.NodeID || mem.State != StateAlive || time.Now().After(deadline) {
			continue
		}
		// A node of our own: the *memberlist.Node values memberlist hands
		// out are updated concurrently under its lock.
		n, err := nodeAt(mem)
		if err == nil {
			err = m.ml.SendReliable(n, msg)
		}
		if err != nil {
			m.cfg.Logger.Debug("membership: leave intent not delivered", "to", mem.ID, "err", err)
		}
	}
	return m.ml.Leave(max(time.Until(deadline), time.Millisecond))
}

// nodeAt builds a memberlist node for mem's gossip address.
func nodeAt(mem Member) (*memberlist.Node, error) {
	host, port, err := splitHostPort(mem.Addr)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("membership: %s: address %q is not an IP", mem.ID, mem.Addr)
	}
	return &memberlist.Node{Name: mem.ID, Addr: ip, Port: uint16(port)}, nil
}

// Shutdown stops gossip without announcing a leave (others will detect this
// node as dead) and stops event delivery. It is idempotent.
func (m *Membership) Shutdown() error {
	var err error
	m.shutdownOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		err = m.ml.Shutdown()
		m.stopAdmission()
		m.stopDispatch()
	})
	return err
}

func (m *Membership) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Membership) stopDispatch() {
	close(m.stop)
	<-m.done
}

// dispatch delivers queued events to OnEvent in order.
func (m *Membership) dispatch() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		case <-m.wake:
		}
		m.mu.Lock()
		batch := m.queue
		m.queue = nil
		m.mu.Unlock()
		for _, e := range batch {
			select {
			case <-m.stop:
				return
			default:
			}
			if m.cfg.OnEvent != nil {
				m.cfg.OnEvent(e)
			}
		}
	}
}

// emitLocked records mem and queues an event; m.mu must be held.
func (m *Membership) emitLocked(t EventType, mem Member) {
	m.members[mem.ID] = mem
	if m.cfg.OnEvent == nil {
		return
	}
	mem.Meta = slices.Clone(mem.Meta)
	m.queue = append(m.queue, Event{Type: t, Member: mem})
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func toMember(n *memberlist.Node, s State) Member {
	return Member{
		ID:    n.Name,
		Addr:  net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		Meta:  slices.Clone(n.Meta),
		State: s,
	}
}

// events implements memberlist.EventDelegate. memberlist calls it serially,
// sometimes with its own locks held: it only touches m.mu.
type events Membership

func (e *events) NotifyJoin(n *memberlist.Node) {
	m := (*Membership)(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.leaving, n.Name)
	if m.admitLocked(toMember(n, StateAlive)) {
		m.emitLocked(EventJoin, toMember(n, StateAlive))
	}
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	m := (*Membership)(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.forgetLocked(n.Name) {
		return // never admitted: nothing was reported
	}
	s := StateDead
	if m.leaving[n.Name] {
		s = StateLeft
	}
	m.emitLocked(EventLeave, toMember(n, s))
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	m := (*Membership)(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	mem := toMember(n, StateAlive)
	if !m.admitLocked(mem) {
		return
	}
	if prev, ok := m.members[mem.ID]; ok && prev.State == StateAlive {
		m.emitLocked(EventUpdate, mem)
	} else {
		m.emitLocked(EventJoin, mem)
	}
}

// delegate implements memberlist.Delegate: metadata and leave intents.
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	m := (*Membership)(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.meta) > limit {
		return nil
	}
	return slices.Clone(m.meta)
}

func (d *delegate) NotifyMsg(b []byte) {
	if (*Membership)(d).forgetMessage(b) {
		return
	}
	id, ok := bytes.CutPrefix(b, leaveIntent)
	if !ok {
		return
	}
	m := (*Membership)(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leaving[string(id)] = true
	m.leftLocked(string(id))
}

// leftLocked moves member id from dead to left, if it is dead: its leave
// intent (or a peer's word that it left) came after it was declared dead.
func (m *Membership) leftLocked(id string) {
	if mem, ok := m.members[id]; ok && mem.State == StateDead {
		mem.State = StateLeft
		m.emitLocked(EventUpdate, mem)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return (*Membership)(d).localState() }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     { (*Membership)(d).mergeRemoteState(buf) }

// slogWriter turns memberlist's "[LEVEL] memberlist: msg" lines into slog
// records.
type slogWriter struct{ l *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	level := slog.LevelInfo
	for _, lv := range []struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG] ", slog.LevelDebug},
		{"[INFO] ", slog.LevelInfo},
		{"[WARN] ", slog.LevelWarn},
		{"[ERR] ", slog.LevelError},
		{"[ERROR] ", slog.LevelError},
	} {
		if rest, ok := strings.CutPrefix(line, lv.prefix); ok {
			line, level = rest, lv.level
			break
		}
	}
	if rest, ok := strings.CutPrefix(line, "memberlist: "); ok {
		line = rest
	}
	w.l.Log(context.Background(), level, line)
	return len(p), nil
}

// memberlistConfig is the memberlist configuration of cfg (cfg with its
// defaults), without the delegates.
//
// Compression is off: the gossip of a cluster is pings, acks and a few
// membership changes of tens of bytes each, which LZW does not shrink,
// and memberlist compressed every one of them with a fresh LZW writer
// (a 64 KiB table each): with the fast timing (a probe every 150 ms,
// gossip every 50 ms) that was most of an idle node's CPU and garbage.
// Peers still read compressed messages (memberlist decodes them whatever
// its own setting), so nodes of either setting share a cluster.
func memberlistConfig(cfg Config) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.EnableCompression = false
	mc.Name = cfg.NodeID
	host, port, _ := splitHostPort(cfg.BindAddr)
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertisePort = port
	if cfg.AdvertiseAddr != "" {
		mc.AdvertiseAddr, mc.AdvertisePort, _ = splitHostPort(cfg.AdvertiseAddr)
	}
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.GossipInterval = cfg.GossipInterval
	mc.PushPullInterval = cfg.PushPullInterval
	mc.SuspicionMult = cfg.SuspicionMult
	mc.TCPTimeout = cfg.TCPTimeout
	mc.GossipToTheDeadTime = cfg.DeadRetention
	mc.DeadNodeReclaimTime = cfg.DeadRetention
	mc.SecretKey = slices.Clone(cfg.SecretKey)
	mc.Logger = log.New(&slogWriter{l: cfg.Logger.With("component", "memberlist")}, "", 0)
	return mc
}
