package sandbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) handleSends(w http.ResponseWriter, r *http.Request) {
	q := SendQuery{Key: r.URL.Query().Get("key"), Tenant: r.URL.Query().Get("tenant"),
		Recipient: r.URL.Query().Get("recipient")}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxSendsLimit {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_limit",
				"message": fmt.Sprintf("limit: must be 1 to %d (got %q)", MaxSendsLimit, v)})
			return
		}
		q.Limit = n
	}
	writeJSON(w, http.StatusOK, map[string]any{"sends": s.Sends(q)})
}

func (s *Server) handleGetFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

// maxAdminBody bounds an /admin/faults body; the object has a handful of
// fields.
const maxAdminBody = 64 << 10

func (s *Server) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_faults", "message": err.Error()})
		return
	}
	if err := s.SetFaults(f); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_faults", "message": err.Error()})
		return
	}
	s.cfg.Log.Info().Interface("faults", s.Faults()).Msg("sandbox faults set")
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	s.cfg.Log.Info().Msg("sandbox reset")
	writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
}

// SetFaults replaces the injected faults. A storm starts now and lasts
// f.StormSeconds.
func (s *Server) SetFaults(f Faults) error {
	f.applyDefaults()
	if err := f.Validate(); err != nil {
		return err
	}
	var re *regexp.Regexp
	if f.PermanentRecipient != "" {
		// Validate compiled it already; this cannot fail.
		re = regexp.MustCompile(f.PermanentRecipient)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.permRE = f, re
	s.stormUntil = s.cfg.Clock.Now().Add(time.Duration(f.StormSeconds * float64(time.Second)))
	return nil
}

// Faults returns the faults in force.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Reset forgets every send and counter and refills the rate limit. The
// faults stay as they are; set them to the zero Faults to clear them.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec = newRecorder(s.cfg.MaxSends, s.cfg.StatsMinutes)
	s.limiter = newLimiter(s.cfg.Rate, s.cfg.Burst)
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.rec.stats(s.cfg.Clock.Now())
	st.Rate, st.Burst = s.cfg.Rate.String(), s.cfg.Burst
	return st
}

// Sends returns the recorded sends matching q, newest first.
func (s *Server) Sends(q SendQuery) []Send {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.find(q)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
