package service

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/rs/zerolog"
)

// AsyncCommitVariable is the escape hatch of CheckDurable.
const AsyncCommitVariable = "OWED_ALLOW_ASYNC_COMMIT"

// qDurability reads, on the service's own connection, what decides whether
// a commit the database acknowledged survives a crash of the server or a
// failover: the session's synchronous_commit (the server's unless ALTER ROLE
// … SET, ALTER DATABASE … SET, PGOPTIONS or the URL's options change it for
// this login, which is why it is read here and not from the server's
// configuration), the standbys a commit waits for, and how many standbys
// stream from the server now (pg_stat_replication's rows are visible to any
// role, its details are not).
const qDurability = `
SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
       (SELECT count(*) FROM pg_stat_replication)`

// Durability is what the database says about a service's commits.
type Durability struct {
	// SynchronousCommit is the session's synchronous_commit.
	SynchronousCommit string
	// StandbyNames is synchronous_standby_names: empty when no commit
	// waits for a standby.
	StandbyNames string
	// Standbys counts the standbys streaming from the server.
	Standbys int
}

// ReadDurability reads db's Durability on one of its connections: the
// session a service's statements run in.
func ReadDurability(ctx context.Context, db *sql.DB) (Durability, error) {
	var d Durability
	if err := db.QueryRowContext(ctx, qDurability).Scan(&d.SynchronousCommit, &d.StandbyNames, &d.Standbys); err != nil {
		return d, fmt.Errorf("read synchronous_commit: %w", err)
	}
	return d, nil
}

// Problem says how a commit the database acknowledged could be lost, and
// what to set instead; it is empty when commits are durable. owed acks a
// queue message once its row's settle committed, and counts a row's sends
// by its claims: a lost claim or settle turns into a resend nobody flagged.
func (d Durability) Problem() string {
	switch d.SynchronousCommit {
	case "on", "remote_write", "remote_apply":
		return ""
	case "local":
		if strings.TrimSpace(d.StandbyNames) == "" {
			return ""
		}
		return fmt.Sprintf("synchronous_commit is local while synchronous_standby_names is %q: a commit does not wait for "+
			"the synchronous standby, so a failover to it can lose commits owed already acted on; set synchronous_commit = on "+
			"(or remote_apply) for this login", d.StandbyNames)
	case "off":
		return "synchronous_commit is off: a crash of the database server can lose the last commits (claims and settles " +
			"whose queue messages were already acknowledged), and the rows they held are then sent again unflagged; " +
			"set synchronous_commit = on for this login (check ALTER ROLE … SET, ALTER DATABASE … SET, PGOPTIONS and " +
			"the URL's options as well as postgresql.conf)"
	}
	return fmt.Sprintf("synchronous_commit is %q, which owed does not know to be durable: set synchronous_commit = on", d.SynchronousCommit)
}

// AsyncStandbys says, when standbys stream from the server but no commit
// waits for any of them, that a failover to one can lose the last commits;
// empty otherwise. It is a warning, not a refusal: an asynchronous read
// replica nobody fails over to loses nothing.
func (d Durability) AsyncStandbys() string {
	if d.Standbys == 0 || strings.TrimSpace(d.StandbyNames) != "" {
		return ""
	}
	return fmt.Sprintf("%d standby(s) stream from the database server asynchronously (synchronous_standby_names is empty): "+
		"a failover to one can lose the last commits; fail over only to a synchronous standby (docs/reliability.md)", d.Standbys)
}

// AsyncCommitError is CheckDurable's refusal.
type AsyncCommitError struct{ Problem string }

func (e *AsyncCommitError) Error() string {
	return fmt.Sprintf("refusing to run on commits that may not be durable: %s. Or, knowing a crash can lose them, set %s=true "+
		"(docs/reliability.md)", e.Problem, AsyncCommitVariable)
}

// CheckDurable refuses a database whose commits a crash or a failover can
// lose (Durability.Problem); with allowAsync (AsyncCommitVariable) it logs
// the problem at error level instead and returns it as warning, for
// /readyz. Standbys streaming asynchronously are logged as a warning. Run it
// on the service's own pool, before its first write.
func CheckDurable(ctx context.Context, db *sql.DB, log zerolog.Logger, allowAsync bool) (warning string, err error) {
	d, err := ReadDurability(ctx, db)
	if err != nil {
		return "", err
	}
	if w := d.AsyncStandbys(); w != "" {
		log.Warn().Int("standbys", d.Standbys).Msg(w)
	}
	problem := d.Problem()
	switch {
	case problem == "":
		return "", nil
	case !allowAsync:
		return "", &AsyncCommitError{Problem: problem}
	}
	warning = AsyncCommitVariable + " is set: " + problem
	log.Error().Str("synchronous_commit", d.SynchronousCommit).Msg(warning)
	return warning, nil
}

// WithReadyWarning adds warning, when not empty, as the "warning" field of
// every JSON object h answers GET /readyz with, keeping its status: a 200
// that says what the service runs without. Any other request, and an
// answer that is no JSON object, passes unchanged.
func WithReadyWarning(h http.Handler, warning string) http.Handler {
	if warning == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		var fields map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if dec.Decode(&fields) == nil && fields != nil {
			fields["warning"] = warning
			if b, err := json.Marshal(fields); err == nil {
				body = append(b, '\n')
				rec.header.Del("Content-Length")
			}
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		w.Write(body)
	})
}

// recorder keeps a small answer (a /readyz body) to be changed before it
// is written.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(status int)      { r.status = status }
