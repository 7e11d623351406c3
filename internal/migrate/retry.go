package migrate

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"regexp"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/lib/pq"
	"github.com/pressly/goose/v3"
)

// A migration runs while the release before it serves: an upgrade applies
// the new migrations under the old binaries, and a rollback runs the Downs
// under the new ones. A serving transaction takes its locks statement by
// statement (a month partition of the ledger when it first touches it, the
// parent when it names it), so a migration that takes exclusive locks on
// several tables can meet one holding the next table it needs while
// waiting for one it holds. PostgreSQL then cancels one of the two with
// deadlock_detected; a migration written with a lock_timeout gets
// lock_not_available instead. Neither says anything about the migration:
// its transaction rolled back whole, and the same migration run again
// finds the tables free a moment later.
//
// So the runner gives such a migration another try, from where goose
// stopped, for up to lockRetryFor. Only a migration that ran in one
// transaction is tried again: one marked NO TRANSACTION may have left
// half its statements done, and its error goes to the operator as is.
//
// A migration whose connection was lost is tried again the same way: the
// server restarted (a failover, or a crash of another backend, which
// ends every session: PostgreSQL 15.18 once crashed on the previous
// release's schedule insert during TestUpgradeAndRollback's rollback) or
// an administrator terminated the session. Its transaction either
// committed, and goose, reading the applied versions again, goes on from
// the next migration, or rolled back whole. A run that lost its
// connection before it reached a migration is tried again too: nothing
// was applied.
const lockRetryFor = 2 * time.Minute

// lockConflict reports whether err is PostgreSQL cancelling a statement
// over a lock: deadlock_detected (40P01) or lock_not_available (55P03).
func lockConflict(err error) bool {
	var pe *pq.Error
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "40P01" || pe.Code == "55P03"
}

// connectionLost reports whether err says the session is gone, not
// anything about the statement it ran: the driver found the connection
// broken (driver.ErrBadConn, a read that ended early), or PostgreSQL
// ended the session or refused a new one while it restarts (class 08, a
// connection exception; admin_shutdown 57P01, crash_shutdown 57P02,
// cannot_connect_now 57P03). A statement cancelled by a timeout or by
// the caller (57014) is not one: it says the migration took too long.
func connectionLost(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var ne *net.OpError
	if errors.As(err, &ne) {
		return true
	}
	var pe *pq.Error
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code.Class() == "08" || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
}

var noTransaction = regexp.MustCompile(`(?m)^--\s*\+goose\s+NO\s+TRANSACTION\s*$`)

// transactional reports whether the migration's file runs in one
// transaction (no "+goose NO TRANSACTION" annotation).
func transactional(fsys fs.FS, s *goose.Source) (bool, error) {
	text, err := fs.ReadFile(fsys, s.Path)
	if err != nil {
		return false, fmt.Errorf("read migration %05d: %w", s.Version, err)
	}
	return !noTransaction.Match(text), nil
}

// withRetry runs step, a goose run over one or more migrations, and
// runs it again while it fails on a lock conflict or a lost connection in
// a transactional migration, or on a lost connection before any
// migration (see lockRetryFor). It returns every migration the tries
// applied or rolled back, in order, and the last error.
func (r Runner) withRetry(ctx context.Context, step func() ([]*goose.MigrationResult, error)) ([]*goose.MigrationResult, error) {
	wait := backoff.NewExponentialBackOff()
	wait.InitialInterval = 50 * time.Millisecond
	wait.MaxInterval = 2 * time.Second
	wait.MaxElapsedTime = lockRetryFor
	b := backoff.WithContext(wait, ctx)
	var done []*goose.MigrationResult
	for {
		res, err := step()
		done = append(done, res...)
		var partial *goose.PartialError
		switch {
		case err == nil:
			return done, nil
		case !errors.As(err, &partial):
			// No migration ran: only a lost connection is worth a retry.
			if !connectionLost(err) {
				return done, err
			}
		default:
			done = append(done, partial.Applied...)
			if !lockConflict(partial.Err) && !connectionLost(partial.Err) {
				return done, err
			}
			if tx, terr := transactional(r.FS, partial.Failed.Source); terr != nil || !tx {
				return done, err
			}
		}
		d := b.NextBackOff()
		if d == backoff.Stop {
			if partial == nil {
				return done, fmt.Errorf("%w (the connection was still lost after %s of tries)", err, lockRetryFor)
			}
			return done, fmt.Errorf("%w (migration %05d still met a lock conflict or a lost connection after %s of tries)",
				err, partial.Failed.Source.Version, lockRetryFor)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return done, err
		case <-t.C:
		}
	}
}
