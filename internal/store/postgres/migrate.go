package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrations are goose's: migrations/NNNNN_name.sql with a "-- +goose Up"
// and a "-- +goose Down" section, recorded in goose's version table, under
// goose's advisory lock. counterd applies them itself (earlier releases ran
// goose, whose package, with database/sql, weighed ~440 KB of the release
// binary) and writes exactly what goose writes, so a database migrated by
// either is current for the other and the goose CLI still reads it
// (docs/postgres.md, "Schema").
const (
	versionTable = "goose_db_version"
	// migrateLockID is goose's lock.DefaultLockID.
	migrateLockID int64 = 4097083626
	// migrateLockTries and migrateLockEvery: the advisory lock is retried
	// every second for five minutes (goose's default: every 5 s).
	migrateLockTries = 301
	migrateLockEvery = time.Second
)

// migration is one file's Up section.
type migration struct {
	version int64
	name    string
	up      string
}

// readMigrations returns the migrations of fsys (*.sql at its root), in
// version order.
func readMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: no version number before its first _", name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		up, err := upSection(string(b))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", name, err)
		}
		ms = append(ms, migration{version: v, name: name, up: up})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s: the same version", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
}

// upSection returns the lines between "-- +goose Up" and "-- +goose Down"
// (or the end). Statement annotations (StatementBegin, NO TRANSACTION) are
// refused: no migration uses them and this runner does not implement them.
func upSection(src string) (string, error) {
	var up []string
	in, seen := false, false
	for line := range strings.Lines(src) {
		t := strings.TrimSpace(line)
		if a, ok := strings.CutPrefix(t, "-- +goose "); ok {
			switch strings.TrimSpace(a) {
			case "Up":
				in, seen = true, true
			case "Down":
				in = false
			default:
				return "", fmt.Errorf("unsupported annotation %q", t)
			}
			continue
		}
		if in {
			up = append(up, line)
		}
	}
	if !seen {
		return "", errors.New(`no "-- +goose Up" section`)
	}
	return strings.Join(up, ""), nil
}

// migrate applies the migrations of fsys that the version table lacks, each
// in its own transaction with its version row, on one connection holding
// goose's advisory lock, as goose's Provider.Up does; like goose, it refuses
// to apply a migration older than the newest applied one.
func migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) (err error) {
	ms, err := readMigrations(fsys)
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	if err := lockMigrations(ctx, conn); err != nil {
		conn.Release()
		return err
	}
	defer func() {
		var ok bool
		uerr := conn.QueryRow(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrateLockID).Scan(&ok)
		if uerr != nil || !ok {
			// Closing the session is what releases its lock for sure.
			_ = conn.Hijack().Close(context.WithoutCancel(ctx))
			return
		}
		conn.Release()
	}()
	if err := ensureVersionTable(ctx, conn); err != nil {
		return err
	}
	applied := map[int64]bool{}
	var newest int64
	rows, err := conn.Query(ctx, `SELECT version_id FROM `+versionTable)
	if err != nil {
		return err
	}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v], newest = true, max(newest, v)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var missing []string
	for _, m := range ms {
		if !applied[m.version] && m.version < newest {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("found %d missing migrations before current version %d: %s", len(missing), newest, strings.Join(missing, ", "))
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// Without arguments, Exec sends the section as one simple
			// query: its statements run in order, inside tx.
			if _, err := tx.Exec(ctx, m.up); err != nil {
				return err
			}
			return insertVersion(ctx, tx, m.version)
		}); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return nil
}

// lockMigrations takes goose's session advisory lock on conn, retrying.
func lockMigrations(ctx context.Context, conn *pgxpool.Conn) error {
	for try := 1; ; try++ {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, migrateLockID).Scan(&ok); err != nil {
			return fmt.Errorf("failed to execute pg_try_advisory_lock: %w", err)
		}
		if ok {
			return nil
		}
		if try == migrateLockTries {
			return errors.New("failed to acquire lock")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(migrateLockEvery):
		}
	}
}

// ensureVersionTable creates goose's version table with its zero row, as
// goose does, unless it exists.
func ensureVersionTable(ctx context.Context, conn *pgxpool.Conn) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS ( SELECT 1 FROM pg_tables WHERE (current_schema() IS NULL OR schemaname = current_schema()) AND tablename = '`+versionTable+`' )`).Scan(&exists); err != nil {
		return fmt.Errorf("check if version table exists: %w", err)
	}
	if exists {
		return nil
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE `+versionTable+` (
		id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY,
		version_id bigint NOT NULL,
		is_applied boolean NOT NULL,
		tstamp timestamp NOT NULL DEFAULT now()
	)`); err != nil {
			return err
		}
		return insertVersion(ctx, tx, 0)
	})
	if err != nil {
		return fmt.Errorf("create version table: %w", err)
	}
	return nil
}

// insertVersion records version as applied, as goose does.
func insertVersion(ctx context.Context, tx pgx.Tx, version int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+versionTable+` (version_id, is_applied) VALUES ($1, $2)`, version, true)
	return err
}
