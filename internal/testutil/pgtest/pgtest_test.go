package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/counterd/counterd/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNewIsolatedDatabases(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := pgtest.New(t), pgtest.New(t)
	if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("databases not isolated: table visible in b")
	}
	var da, db string
	_ = a.QueryRow(ctx, "SELECT current_database()").Scan(&da)
	_ = b.QueryRow(ctx, "SELECT current_database()").Scan(&db)
	if da == db {
		t.Fatalf("same database %q", da)
	}
}

func TestServerRestartKeepsData(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	dsn := srv.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exec := func(sql string) {
		t.Helper()
		c, err := pgxConnect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE kv (k int primary key, v int); INSERT INTO kv VALUES (1, 42)")
	srv.Restart(t)
	c, err := pgxConnect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM kv WHERE k = 1").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after restart: v=%d err=%v", v, err)
	}
}
