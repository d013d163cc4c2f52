package postgres

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/counterd/counterd/internal/testutil/pgtest"
)

// freshPool is a pool on a new, empty database.
func freshPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(ctxT(t, 30*time.Second), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// gooseProvider is goose, configured as counterd configured it before it
// applied the migrations itself.
func gooseProvider(t *testing.T, pool *pgxpool.Pool) *goose.Provider {
	t.Helper()
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dump is the schema of pool's database (every column of every table,
// goose_db_version included) and the version rows.
func dump(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	var out []string
	for _, q := range []string{
		`SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') || ' ' || is_identity
			FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, column_name`,
		`SELECT indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname`,
		`SELECT 'version ' || version_id || ' ' || is_applied FROM goose_db_version ORDER BY id`,
	} {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestMigrateAsGoose: migrate leaves a database exactly as goose left it
// (schema, version table and its rows), continues a database goose
// migrated part way, and goose then finds nothing pending.
func TestMigrateAsGoose(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 2*time.Minute)
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := readMigrations(sub)
	if err != nil || len(ms) < 3 {
		t.Fatalf("readMigrations: %d, %v", len(ms), err)
	}
	last := ms[len(ms)-1].version

	byGoose := freshPool(t)
	if _, err := gooseProvider(t, byGoose).Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := dump(t, byGoose)

	byUs := freshPool(t)
	if err := migrate(ctx, byUs, sub); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, byUs); !slices.Equal(got, want) {
		t.Errorf("migrated by counterd:\n%s\nby goose:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := migrate(ctx, byUs, sub); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, byUs); !slices.Equal(got, want) {
		t.Errorf("a second migrate changed the database:\n%s", strings.Join(got, "\n"))
	}
	p := gooseProvider(t, byUs)
	if v, err := p.GetDBVersion(ctx); err != nil || v != last {
		t.Errorf("goose reads version %d, %v; want %d", v, err, last)
	}
	if pending, err := p.HasPending(ctx); err != nil || pending {
		t.Errorf("goose finds pending migrations (%v, %v)", pending, err)
	}

	// An upgrade: goose applied the first migrations, counterd the rest.
	upgraded := freshPool(t)
	if _, err := gooseProvider(t, upgraded).UpTo(ctx, ms[1].version); err != nil {
		t.Fatal(err)
	}
	if err := migrate(ctx, upgraded, sub); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, upgraded); !slices.Equal(got, want) {
		t.Errorf("upgraded:\n%s\nby goose:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestMigrateRefusesMissing: as goose, a migration older than the newest
// applied one is an error, not applied out of order.
func TestMigrateRefusesMissing(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, time.Minute)
	pool := freshPool(t)
	fsys := fstest.MapFS{
		"00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (x int);\n-- +goose Down\nDROP TABLE a;\n")},
		"00003_c.sql": {Data: []byte("-- +goose Up\nCREATE TABLE c (x int);\nCREATE TABLE c2 (x int);\n")},
	}
	if err := migrate(ctx, pool, fsys); err != nil {
		t.Fatal(err)
	}
	fsys["00002_b.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nCREATE TABLE b (x int);\n")}
	err := migrate(ctx, pool, fsys)
	if err == nil || !strings.Contains(err.Error(), "missing migrations before current version 3: 00002_b.sql") {
		t.Fatalf("migrate = %v, want the missing 00002_b.sql", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('a', 'b', 'c', 'c2')`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d tables (%v), want a, c and c2", n, err)
	}
}

func TestUpSection(t *testing.T) {
	for _, c := range []struct{ src, up, err string }{
		{"-- header\n-- +goose Up\nA;\nB;\n-- +goose Down\nC;\n", "A;\nB;\n", ""},
		{"-- +goose Up\nA;", "A;", ""},
		{"A;\n", "", "no \"-- +goose Up\" section"},
		{"-- +goose Up\n-- +goose StatementBegin\nA;\n-- +goose StatementEnd\n", "", "unsupported annotation"},
		{"-- +goose NO TRANSACTION\n-- +goose Up\nA;\n", "", "unsupported annotation"},
	} {
		up, err := upSection(c.src)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("upSection(%q) = %q, %v; want error %q", c.src, up, err, c.err)
			}
			continue
		}
		if err != nil || up != c.up {
			t.Errorf("upSection(%q) = %q, %v; want %q", c.src, up, err, c.up)
		}
	}
}

// TestMigrateLockIsGoose: nodes of an older release, which ran goose, and
// of this one exclude each other while they migrate.
func TestMigrateLockIsGoose(t *testing.T) {
	if migrateLockID != lock.DefaultLockID {
		t.Errorf("lock id %d, goose's is %d", migrateLockID, lock.DefaultLockID)
	}
}
