package receipt

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/owedhq/owed/internal/clock"
	"github.com/owedhq/owed/internal/ledger"
)

// Recorder keeps receipts: the ledger's Receipts role (ledger.Receipts).
type Recorder interface {
	RecordReceipt(ctx context.Context, r ledger.Receipt) (ledger.ReceiptResult, error)
}

// maxLoggedUnknown bounds the unknown ids one log line names.
const maxLoggedUnknown = 5

// Handler serves the receipt endpoints.
type Handler struct {
	cfg      Config
	sendGrid *ecdsa.PublicKey
	postmark PostmarkAuth
	rec      Recorder
	clock    clock.Clock
	log      zerolog.Logger
}

// New validates cfg and returns the endpoints, recording through rec and
// telling the webhook timestamps' freshness by clk (nil: clock.Real).
func New(cfg Config, rec Recorder, clk clock.Clock, log zerolog.Logger) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.Real()
	}
	h := &Handler{cfg: cfg, postmark: NewPostmarkAuth(cfg.PostmarkUser, cfg.PostmarkPassword), rec: rec, clock: clk, log: log}
	if cfg.SendGridPublicKey != "" {
		h.sendGrid, _ = ParseSendGridKey(cfg.SendGridPublicKey) // Validate parsed it
	}
	return h, nil
}

// endpoint is one provider's route: whether it is configured, its body
// bound, and its verify-then-parse.
type endpoint struct {
	provider string
	enabled  bool
	limit    int64
	read     func(r *http.Request, body []byte) (Batch, error)
}

// Mount registers POST /receipts/{twilio,sendgrid,postmark,webhook} on mux
// and logs which are served (never their secrets).
func (h *Handler) Mount(mux *http.ServeMux) {
	served := []string{}
	for _, e := range []endpoint{
		{ProviderTwilio, h.cfg.TwilioAuthToken != "", MaxTwilioBody, h.readTwilio},
		{ProviderSendGrid, h.sendGrid != nil, MaxSendGridBody, h.readSendGrid},
		{ProviderPostmark, h.cfg.PostmarkUser != "", MaxPostmarkBody, h.readPostmark},
		{ProviderWebhook, h.cfg.WebhookSecret != "", MaxWebhookBody, h.readWebhook},
	} {
		mux.HandleFunc("/receipts/"+e.provider, h.serve(e))
		if e.enabled {
			served = append(served, "/receipts/"+e.provider)
		}
	}
	h.log.Info().Strs("served", served).Msg("receipt endpoints")
}

func (h *Handler) readTwilio(r *http.Request, body []byte) (Batch, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return Batch{}, malformed("the status callback is not a form (application/x-www-form-urlencoded)")
	}
	signed := strings.TrimRight(h.cfg.BaseURL, "/") + r.URL.RequestURI()
	if err := VerifyTwilio(h.cfg.TwilioAuthToken, signed, form, r.Header.Get(HeaderTwilioSignature)); err != nil {
		return Batch{}, err
	}
	return ParseTwilio(form)
}

func (h *Handler) readSendGrid(r *http.Request, body []byte) (Batch, error) {
	if err := VerifySendGrid(h.sendGrid, r.Header.Get(HeaderSendGridSignature), r.Header.Get(HeaderSendGridTimestamp),
		body); err != nil {
		return Batch{}, err
	}
	return ParseSendGrid(body)
}

func (h *Handler) readPostmark(r *http.Request, body []byte) (Batch, error) {
	if err := h.postmark.Verify(r); err != nil {
		return Batch{}, err
	}
	return ParsePostmark(body)
}

func (h *Handler) readWebhook(r *http.Request, body []byte) (Batch, error) {
	if err := VerifyWebhook(h.cfg.WebhookSecret, r.Header, body, h.clock.Now()); err != nil {
		return Batch{}, err
	}
	return ParseWebhook(body)
}

// Answer is the body of a 200: what the callback's receipts did.
type Answer struct {
	// Recorded receipts are new; Replayed ones were recorded before.
	Recorded int `json:"recorded"`
	Replayed int `json:"replayed"`
	// Unknown receipts name a message id no accepted send had.
	Unknown int `json:"unknown"`
	// Ignored events are not receipts owed keeps (opens, clicks, a status
	// still inside the provider).
	Ignored int `json:"ignored"`
}

func (h *Handler) serve(e endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !e.enabled {
			// An endpoint without its secret does not exist.
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed: use POST")
			return
		}
		start := time.Now()
		log := h.log.With().Str("provider", e.provider).Logger()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, e.limit))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", "the body is over the endpoint's bound")
			return
		case err != nil:
			writeError(w, http.StatusBadRequest, "bad_request", "could not read the request body")
			return
		}
		batch, err := e.read(r, body)
		var bad malformedError
		switch {
		case errors.Is(err, ErrUnsigned), errors.Is(err, ErrSignature):
			log.Info().Err(err).Msg("receipt refused")
			writeError(w, http.StatusUnauthorized, "unauthorized", err.Error())
			return
		case errors.As(err, &bad):
			log.Info().Err(err).Msg("receipt refused")
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		case err != nil:
			writeError(w, http.StatusBadRequest, "bad_request", "could not read the receipt")
			return
		}
		ans, unknown, err := h.record(r.Context(), batch)
		ev := log.Info()
		if err != nil {
			ev = log.Error().Err(err)
		}
		ev.Int("receipts", len(batch.Receipts)).Int("recorded", ans.Recorded).Int("replayed", ans.Replayed).
			Int("unknown", ans.Unknown).Strs("unknown_ids", unknown).Int("ignored", ans.Ignored).
			Int64("duration_ms", time.Since(start).Milliseconds()).Msg("receipts")
		if err != nil {
			// The provider retries a non-2xx, and a retry records only what
			// this attempt did not.
			writeError(w, http.StatusServiceUnavailable, "unavailable", "could not record the receipts; retry")
			return
		}
		writeJSON(w, http.StatusOK, ans)
	}
}

// record keeps each receipt of b; it stops at the first error. unknown
// names the first few unknown message ids, for the log.
func (h *Handler) record(ctx context.Context, b Batch) (ans Answer, unknown []string, err error) {
	ans.Ignored = b.Ignored
	for _, rc := range b.Receipts {
		res, err := h.rec.RecordReceipt(ctx, rc)
		if err != nil {
			return ans, unknown, err
		}
		switch {
		case !res.Known:
			ans.Unknown++
			if len(unknown) < maxLoggedUnknown {
				unknown = append(unknown, rc.ProviderMessageID)
			}
		case res.Recorded:
			ans.Recorded++
		default:
			ans.Replayed++
		}
	}
	return ans, unknown, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
