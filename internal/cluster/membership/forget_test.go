package membership

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestForget: a forgotten dead member disappears from every member at
// once, a member that joins later learns the forgotten id, and the node
// coming back under that id is never reported and learns it was forgotten.
func TestForget(t *testing.T) {
	a := start(t, fastConfig(t, "a"))
	b := start(t, fastConfig(t, "b", a.Addr()))
	c := start(t, fastConfig(t, "c", a.Addr()))
	ms := []*Membership{a, b}
	eventually(t, 5*time.Second, "3 members", func() bool { return allAlive(append(ms, c), "a", "b", "c") })
	_ = c.Shutdown()
	eventually(t, 5*time.Second, "c dead", func() bool {
		sa, _ := stateOf(a, "c")
		sb, _ := stateOf(b, "c")
		return sa == StateDead && sb == StateDead
	})
	if err := a.Forget("c"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "c gone from a and b", func() bool {
		_, ina := stateOf(a, "c")
		_, inb := stateOf(b, "c")
		return !ina && !inb && b.IsForgotten("c")
	})
	if err := a.Forget("c"); err != nil { // twice: no-op
		t.Fatal(err)
	}

	d := start(t, fastConfig(t, "d", b.Addr()))
	eventually(t, 5*time.Second, "d learns c is forgotten", func() bool { return d.IsForgotten("c") })
	ms = append(ms, d)
	eventually(t, 5*time.Second, "a, b, d", func() bool { return allAlive(ms, "a", "b", "d") })

	// c comes back (another port: accepted by memberlist after
	// DeadRetention) with its old name.
	c2 := start(t, fastConfig(t, "c", a.Addr()))
	eventually(t, 5*time.Second, "c learns it was forgotten", c2.SelfForgotten)
	time.Sleep(500 * time.Millisecond) // gossip about c2 has had time to spread
	for _, m := range ms {
		if _, ok := stateOf(m, "c"); ok {
			t.Fatalf("%s reports the forgotten c again: %v", m.ID(), m.Members())
		}
	}
	// Under load a member may be suspected for a moment (fast probe
	// timings); what must hold is that a, b and d stay the cluster.
	eventually(t, 5*time.Second, "a, b, d still alive", func() bool { return allAlive(ms, "a", "b", "d") })
}

// TestForgottenMergeIsAUnion: merging push-pull states is a set union,
// whatever the order and duplicates, and bad input changes nothing.
func TestForgottenMergeIsAUnion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		states := rapid.SliceOfN(rapid.SliceOfN(rapid.StringMatching(`[a-e]{1,2}`), 0, 4), 0, 5).Draw(t, "states")
		garbage := rapid.SliceOfN(rapid.SliceOf(rapid.Byte()), 0, 3).Draw(t, "garbage")
		perm := rapid.Permutation(states).Draw(t, "perm")
		merge := func(order [][]string) []string {
			m := &Membership{cfg: Config{NodeID: "self", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
				members: map[string]Member{}, leaving: map[string]bool{}, admit: newAdmission()}
			for i, ids := range order {
				b, _ := json.Marshal(pushPullState{Forgotten: ids})
				m.mergeRemoteState(b)
				m.mergeRemoteState(b) // idempotent
				if i < len(garbage) {
					m.mergeRemoteState(garbage[i])
				}
			}
			// Round trip: what a node sends is what it holds.
			var back pushPullState
			if err := json.Unmarshal(m.localState(), &back); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(back.Forgotten, m.Forgotten()) {
				t.Fatalf("local state %v, held %v", back.Forgotten, m.Forgotten())
			}
			return m.Forgotten()
		}
		var want []string
		for _, ids := range states {
			want = append(want, ids...)
		}
		slices.Sort(want)
		want = slices.Compact(want)
		if got := merge(states); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("merge %v = %v, want %v", states, got, want)
		}
		if a, b := merge(states), merge(perm); !slices.Equal(a, b) {
			t.Fatalf("order matters: %v vs %v", a, b)
		}
	})
}

// TestForgetFile: the forgotten ids survive a restart through ForgetFile,
// and a bad file stops Start with ErrForgetFile.
func TestForgetFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "forgotten.json")
	cfg := fastConfig(t, "a")
	cfg.ForgetFile = file
	a := start(t, cfg)
	if err := a.Forget("x"); err != nil {
		t.Fatal(err)
	}
	if err := a.Forget("y"); err != nil {
		t.Fatal(err)
	}
	_ = a.Shutdown()
	a2 := start(t, cfg)
	if got := a2.Forgotten(); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("after restart: forgotten %v", got)
	}
	_ = a2.Shutdown()
	for _, bad := range []string{"{", `{"x":1}`, `[""]`, `[1]`} {
		if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if m, err := Start(cfg); !errors.Is(err, ErrForgetFile) {
			if m != nil {
				_ = m.Shutdown()
			}
			t.Fatalf("forget file %q: Start = %v, want ErrForgetFile", bad, err)
		}
	}
}

// FuzzParseForgotten: any input is either refused or a list of non-empty
// ids that survives a round trip.
func FuzzParseForgotten(f *testing.F) {
	for _, s := range []string{`[]`, `["n1","n2"]`, `[""]`, `{`, `null`, `["a","a"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := parseForgotten(b)
		if err != nil {
			return
		}
		if slices.Contains(ids, "") {
			t.Fatalf("accepted an empty id: %q", b)
		}
		out, err := json.Marshal(ids)
		if err != nil {
			t.Fatal(err)
		}
		back, err := parseForgotten(out)
		if err != nil || !slices.Equal(back, ids) {
			t.Fatalf("round trip %q: %q %v", out, back, err)
		}
	})
}

// TestLeftFromPeerState: a member that declared a leaver dead (it missed
// the leave intent) learns from a peer's push-pull state that it left;
// a member alive or unknown here is not touched by that word.
func TestLeftFromPeerState(t *testing.T) {
	m := &Membership{members: map[string]Member{
		"gone":  {ID: "gone", State: StateDead},
		"back":  {ID: "back", State: StateAlive},
		"crash": {ID: "crash", State: StateDead},
	}, leaving: map[string]bool{}}
	m.mergeRemoteState([]byte(`{"left":["gone","back","nobody"]}`))
	want := map[string]State{"gone": StateLeft, "back": StateAlive, "crash": StateDead}
	for id, s := range want {
		if got := m.members[id].State; got != s {
			t.Errorf("%s: %v, want %v", id, got, s)
		}
	}
	if _, ok := m.members["nobody"]; ok {
		t.Error("an unknown id became a member")
	}
	// The state this member sends on lists what it knows left.
	var st pushPullState
	if err := json.Unmarshal(m.localState(), &st); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Left, []string{"gone"}) {
		t.Errorf("local state lists %v as left, want [gone]", st.Left)
	}
}
