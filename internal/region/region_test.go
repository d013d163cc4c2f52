package region

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/counterd/counterd/internal/engine"
)

func TestParsePeers(t *testing.T) {
	for name, c := range map[string]struct {
		list string
		want []Peer
		bad  bool
	}{
		"empty":         {list: ""},
		"one":           {list: "us=10.0.0.1:9090", want: []Peer{{"us", "10.0.0.1:9090"}}},
		"two, spaces":   {list: " us=a:1 , DC_ASIA_0=[::1]:9090", want: []Peer{{"us", "a:1"}, {"DC_ASIA_0", "[::1]:9090"}}},
		"no equals":     {list: "us", bad: true},
		"empty name":    {list: "=a:1", bad: true},
		"bad name":      {list: "u s=a:1", bad: true},
		"self":          {list: "eu=a:1", bad: true},
		"two gateways":  {list: "us=a:1,asia=c:3,us=b:2", want: []Peer{{"us", "a:1"}, {"asia", "c:3"}, {"us", "b:2"}}},
		"address twice": {list: "us=a:1,asia=a:1", bad: true},
		"no port":       {list: "us=a", bad: true},
		"no host":       {list: "us=:9090", bad: true},
		"trailing ,":    {list: "us=a:1,", bad: true},
		"long name":     {list: strings.Repeat("x", MaxNameLen+1) + "=a:1", bad: true},
		"max long name": {list: strings.Repeat("x", MaxNameLen) + "=a:1", want: []Peer{{strings.Repeat("x", MaxNameLen), "a:1"}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePeers(c.list, "eu")
			if c.bad {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("ParsePeers(%q) = %v, %v; want ErrInvalid", c.list, got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("ParsePeers(%q) = %v, %v; want %v", c.list, got, err, c.want)
			}
		})
	}
}

// FuzzParsePeers: a list parses into valid peers other than self at distinct addresses
// that format back to a list parsing the same, or fails with ErrInvalid.
func FuzzParsePeers(f *testing.F) {
	f.Add("us=10.0.0.1:9090,asia=[::1]:1")
	f.Add("eu=a:1")
	f.Add("x=:,=")
	f.Fuzz(func(t *testing.T, list string) {
		peers, err := ParsePeers(list, "eu")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		var parts []string
		seen := map[string]bool{}
		for _, p := range peers {
			if ValidateName(p.Name) != nil || p.Name == "eu" || seen[p.Addr] {
				t.Fatalf("accepted peer %+v", p)
			}
			seen[p.Addr] = true
			parts = append(parts, p.Name+"="+p.Addr)
		}
		again, err := ParsePeers(strings.Join(parts, ","), "eu")
		if err != nil || len(again) != len(peers) || (len(peers) > 0 && !reflect.DeepEqual(again, peers)) {
			t.Fatalf("round trip of %v: %v, %v", peers, again, err)
		}
	})
}

// TestRecord: the first start records the region in the data directory;
// a restart under another region, or none, is refused and changes nothing.
func TestRecord(t *testing.T) {
	cfg := engine.DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() *engine.Engine {
		e, err := engine.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	e := open()
	if err := Record(e, ""); err != nil {
		t.Fatal(err)
	}
	if err := Record(e, "eu"); err != nil { // no record yet: takes it
		t.Fatal(err)
	}
	if err := Record(e, "eu"); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = open()
	for _, other := range []string{"us", ""} {
		if err := Record(e, other); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), `"eu"`) {
			t.Fatalf("restart as %q: %v, want ErrChanged naming eu", other, err)
		}
	}
	if err := Record(e, "eu"); err != nil {
		t.Fatalf("restart as eu after refusals: %v", err)
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler(func() Status {
		return Status{Region: "eu", Node: "n1", Peers: []PeerStatus{{Peer: Peer{"us", "10.0.0.1:9090"}}}}
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/regions")
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || st.Region != "eu" || st.Node != "n1" || len(st.Peers) != 1 || st.Peers[0].Peer != (Peer{"us", "10.0.0.1:9090"}) {
		t.Fatalf("GET /regions: %d %+v %v", resp.StatusCode, st, err)
	}
	for path, want := range map[string]int{"/regions/x": 404, "/regionsx": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err = http.Post(srv.URL+"/regions", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") == "" {
		t.Fatalf("POST /regions: %d", resp.StatusCode)
	}
	// Without --region the peers list is empty, not null.
	rec := httptest.NewRecorder()
	Handler(func() Status { return Status{Node: "n1"} }).ServeHTTP(rec, httptest.NewRequest("GET", "/regions", nil))
	if got := rec.Body.String(); got != `{"region":"","node":"n1","interval_ms":0,"peers":[]}`+"\n" {
		t.Fatalf("no region: %s", got)
	}
}
