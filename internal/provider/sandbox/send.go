package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/provider/webhook"
)

// handleSend answers one send: the body and signature are checked first, then,
// under one lock, a storm, the rate limit, the permanent-recipient pattern and
// the fault draw decide, in that order, before the send is recorded.
func (s *Server) handleSend(w http.ResponseWriter, r *http.Request) {
	log := s.cfg.Log.With().Str("key", r.Header.Get(webhook.HeaderID)).Logger()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.reject(w, log, http.StatusRequestEntityTooLarge, "body_too_large",
				fmt.Sprintf("body exceeds %d bytes", MaxBodyBytes), badRequests)
			return
		}
		s.reject(w, log, http.StatusBadRequest, "unreadable_body", err.Error(), badRequests)
		return
	}
	if s.cfg.Secret != "" {
		if err := webhook.Verify(s.cfg.Secret, r.Header, body, s.cfg.Clock.Now(), s.cfg.Tolerance); err != nil {
			s.reject(w, log, http.StatusUnauthorized, "invalid_signature", err.Error(), unauthorized)
			return
		}
	}
	key := r.Header.Get(webhook.HeaderID)
	if key == "" {
		s.reject(w, log, http.StatusBadRequest, "missing_idempotency_key", "the webhook-id header is required", badRequests)
		return
	}
	var p webhook.Payload
	if err := json.Unmarshal(body, &p); err != nil {
		s.reject(w, log, http.StatusBadRequest, "invalid_payload", "body is not a webhook payload: "+err.Error(), badRequests)
		return
	}
	if p.Data.NotificationID == 0 {
		p.Data.NotificationID, _ = strconv.ParseInt(r.Header.Get(webhook.HeaderNotificationID), 10, 64)
	}
	if p.Data.Tenant == "" {
		p.Data.Tenant = r.Header.Get(webhook.HeaderTenant)
	}

	// Everything from here to the decision runs under one lock, so that the
	// limiter, the fault draw and the record see one consistent order.
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	f := s.faults
	if now.Before(s.stormUntil) {
		s.rec.faults[FaultStorm]++
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(f.StormRetryAfterSeconds))
		s.reply(w, log, http.StatusTooManyRequests, "rate_limited", "429 storm injected")
		return
	}
	if ok, wait := s.limiter.allow(now); !ok {
		s.rec.rateLimited++
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(wait), 10))
		s.reply(w, log, http.StatusTooManyRequests, "rate_limited",
			fmt.Sprintf("over the sandbox rate of %s (burst %d)", s.cfg.Rate, s.cfg.Burst))
		return
	}
	if s.permRE != nil && s.permRE.MatchString(p.Data.Recipient) {
		s.rec.faults[FaultPermanent]++
		s.mu.Unlock()
		// "permanent": true is how a webhook receiver says a message will
		// never be accepted; any other 4xx is retried (webhook.classify).
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "recipient_rejected",
			"message": "recipient matches the permanent-failure pattern", "permanent": true})
		log.Info().Str("outcome", "recipient_rejected").Int("status", http.StatusUnprocessableEntity).Msg("sandbox send")
		return
	}
	draw := s.cfg.Rand()
	switch {
	case draw < f.ErrorRate:
		s.rec.faults[FaultError]++
		s.mu.Unlock()
		s.reply(w, log, http.StatusServiceUnavailable, "injected_error", "5xx injected")
		return
	case draw < f.ErrorRate+f.TimeoutRate:
		s.rec.faults[FaultTimeout]++
		s.mu.Unlock()
		s.hang(w, r, log, f)
		return
	}
	sent, dup := s.rec.accept(key, p, now)
	s.mu.Unlock()
	// The line is the receipt: one per accepted send, duplicates included,
	// with the row, the key and the instant to the microsecond (the log's
	// own time has whole seconds), so a reader can count and time every
	// receipt of every row.
	log.Info().Str("outcome", "accepted").Bool("duplicate", dup).Str("tenant", sent.Tenant).
		Int64("notification_id", sent.NotificationID).Str("message_id", sent.MessageID).
		Str("accepted_at", now.UTC().Format(time.RFC3339Nano)).Msg("sandbox send")
	writeJSON(w, http.StatusOK, map[string]any{"id": sent.MessageID, "duplicate": dup})
}

// hang holds the request for the configured time, as a provider that stopped
// answering would, then answers 504 or drops the connection. It returns early
// when the client gives up or the server shuts down.
func (s *Server) hang(w http.ResponseWriter, r *http.Request, log zerolog.Logger, f Faults) {
	t := time.NewTimer(time.Duration(f.TimeoutSeconds * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
	if f.TimeoutMode == TimeoutClose {
		log.Info().Str("outcome", "timeout_close").Msg("sandbox send")
		// ErrAbortHandler makes net/http drop the connection without a
		// response and without logging a panic.
		panic(http.ErrAbortHandler)
	}
	s.reply(w, log, http.StatusGatewayTimeout, "injected_timeout", "timeout injected")
}

// Counters for requests refused before the limiter, chosen by reject under
// the lock because Reset replaces the recorder.
func badRequests(r *recorder) *int64  { return &r.badRequests }
func unauthorized(r *recorder) *int64 { return &r.unauthorized }

// reject answers a request refused before it reached the limiter and counts
// it in the counter that counter picks.
func (s *Server) reject(w http.ResponseWriter, log zerolog.Logger, status int, code, msg string, counter func(*recorder) *int64) {
	s.mu.Lock()
	*counter(s.rec)++
	s.mu.Unlock()
	s.reply(w, log, status, code, msg)
}

func (s *Server) reply(w http.ResponseWriter, log zerolog.Logger, status int, code, msg string) {
	log.Info().Str("outcome", code).Int("status", status).Msg("sandbox send")
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}
