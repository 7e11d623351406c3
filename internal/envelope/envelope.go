// Package envelope is the queue message the sweeper publishes for one ledger
// row and the worker consumes. It carries only what locates the row — the
// tenant, the id and the due time the message was published for — never the
// content: the worker reads the row in the tenant's scope, so a message can
// neither widen its own access nor send content the ledger does not hold.
package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/owedhq/owed/internal/tenant"
)

// Version is the envelope format this build writes and reads.
const Version = 1

// MaxBytes bounds an envelope; anything larger is not one of ours.
const MaxBytes = 4 << 10

// Envelope locates one ledger row.
type Envelope struct {
	V      int       `json:"v"`
	Tenant string    `json:"tenant_id"`
	ID     int64     `json:"id"`
	DueAt  time.Time `json:"due_at"`
	// Key is the row's idempotency key as the sweeper derived it. The
	// worker never sends it: it derives the key from the row it claimed
	// (ledger.IdempotencyKey), so a message carrying another row's key
	// cannot make the provider drop this row's send as a repeat. A key
	// unlike the row's is only counted and logged.
	Key string `json:"key"`
	// Digest, when set, says the message stands for the digest of that id
	// (ledger.ClaimDigest): the worker claims every owed member of the
	// digest due at DueAt, and ID is one of them. A worker older than
	// digests refuses the field as unknown, so the workers are upgraded
	// before a tenant declares a digest (docs/upgrade.md).
	Digest int64 `json:"digest,omitempty"`
}

// Encode returns the JSON body of e.
func Encode(e Envelope) ([]byte, error) {
	e.V = Version
	if err := e.validate(); err != nil {
		return nil, err
	}
	e.DueAt = e.DueAt.UTC()
	return json.Marshal(e)
}

// Decode parses and checks a message body. Its errors are reasons a worker
// puts on a dead-lettered message, so they say what was wrong.
func Decode(b []byte) (Envelope, error) {
	var e Envelope
	if len(b) > MaxBytes {
		return e, fmt.Errorf("envelope: %d bytes exceeds the limit of %d", len(b), MaxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("envelope: not valid JSON: %v", err)
	}
	if dec.More() {
		return e, errors.New("envelope: trailing data after the JSON object")
	}
	if e.V != Version {
		return e, fmt.Errorf("envelope: v=%d is not supported (this worker reads v=%d)", e.V, Version)
	}
	if err := e.validate(); err != nil {
		return e, err
	}
	e.DueAt = e.DueAt.UTC()
	return e, nil
}

func (e Envelope) validate() error {
	if err := tenant.Validate(e.Tenant); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	switch {
	case e.ID <= 0:
		return fmt.Errorf("envelope: id must be a positive row id, got %d", e.ID)
	case e.DueAt.IsZero():
		return errors.New("envelope: due_at is required")
	case e.DueAt.UTC().Year() < 0 || e.DueAt.UTC().Year() > 9999:
		// An offset can carry a time the decoder read into a year JSON
		// cannot write (and the ledger cannot hold): such a message could
		// never be encoded again, nor its row claimed.
		return fmt.Errorf("envelope: due_at %s is outside the years 0 to 9999 in UTC", e.DueAt.Format(time.RFC3339))
	case e.Digest < 0:
		return fmt.Errorf("envelope: digest must be a positive digest id, got %d", e.Digest)
	case e.Key == "" || len(e.Key) > 256:
		return errors.New("envelope: key must be 1 to 256 bytes")
	}
	return nil
}
