package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/owedhq/owed/internal/queue/wire"
)

// This file is the emulator's HTTP surface: the routes, authentication,
// fault injection and the answer shapes. Every /queue endpoint is a row of
// the table in routes; what one endpoint does is in publish.go, consume.go
// and deadletters.go, and the checks they share are in validate.go.

// apiError is an error answered to the client as {"error": {…}}.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

// invalid is a 400 whose message starts with the offending field.
func invalid(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: wire.CodeInvalidRequest, msg: field + ": " + fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *apiError {
	return &apiError{status: http.StatusNotFound, code: wire.CodeNotFound, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *apiError) {
	retryable := e.status == http.StatusTooManyRequests || e.status >= 500
	writeJSON(w, e.status, wire.ErrorBody{Error: wire.ErrorDetail{Code: e.code, Message: e.msg, Retryable: retryable}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encode response","retryable":true}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// handlerFunc serves one endpoint and returns the value for {"data": …}. An
// *apiError is answered as is; any other error is a logged 500.
type handlerFunc func(r *http.Request) (any, error)

// queueRequest is a POST body: a wire request type, which names its queue.
type queueRequest[T any] interface {
	*T
	QueueName() string
}

// post adapts serve to a handlerFunc: the body is decoded into a fresh T (at
// most limit bytes, no unknown fields, nothing after it) and the queue it
// names is checked before serve sees it.
func post[T any, P queueRequest[T]](e *Emulator, limit int64, serve func(*http.Request, P) (any, error)) handlerFunc {
	return func(r *http.Request) (any, error) {
		req := P(new(T))
		if err := e.decode(r, limit, req); err != nil {
			return nil, err
		}
		if err := e.checkQueue(req.QueueName()); err != nil {
			return nil, err
		}
		return serve(r, req)
	}
}

// get adapts serve to a handlerFunc: the queue is the "queue" query
// parameter, checked before serve sees it.
func get(e *Emulator, serve func(r *http.Request, queue string) (any, error)) handlerFunc {
	return func(r *http.Request) (any, error) {
		name := r.URL.Query().Get("queue")
		if err := e.checkQueue(name); err != nil {
			return nil, err
		}
		return serve(r, name)
	}
}

func (e *Emulator) routes() {
	m := http.NewServeMux()
	m.HandleFunc("/healthz", e.healthz)
	for _, ep := range []struct {
		path   string
		method string
		// publish puts the endpoint in a throttle fault's "publish" scope.
		publish bool
		serve   handlerFunc
	}{
		{"/queue/publish", http.MethodPost, true, post(e, publishBodyLimit, e.publish)},
		// The batch checks its entries before its queue, so it decodes its
		// own body (parsePublishBatch).
		{"/queue/publish_batch", http.MethodPost, true, e.publishBatch},
		{"/queue/consume", http.MethodPost, false, post(e, smallBodyLimit, e.consume)},
		{"/queue/ack", http.MethodPost, false, post(e, smallBodyLimit, e.ack)},
		{"/queue/nack", http.MethodPost, false, post(e, smallBodyLimit, e.nack)},
		{"/queue/extend", http.MethodPost, false, post(e, smallBodyLimit, e.extend)},
		{"/queue/stats", http.MethodGet, false, get(e, e.stats)},
		{"/queue/dead_letters", http.MethodGet, false, get(e, e.deadLetters)},
		{"/queue/dead_letters/{id}", http.MethodGet, false, get(e, e.deadLetter)},
		{"/queue/dead_letters/redrive", http.MethodPost, false, post(e, smallBodyLimit, e.redrive)},
		{"/queue/dead_letters/delete", http.MethodPost, false, post(e, smallBodyLimit, e.deleteDeadLetters)},
	} {
		m.Handle(ep.path, e.endpoint(ep.method, ep.publish, ep.serve))
	}
	m.Handle("/admin/faults", e.faultsAuthorized(http.HandlerFunc(e.adminFaults)))
	m.Handle("/", e.authorized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, notFound("no endpoint %s %s; see docs/queue-api.md", r.Method, r.URL.Path))
	})))
	e.mux = m
}

// ServeHTTP serves the contract.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.mux.ServeHTTP(w, r) }

// faultsAuthorized lets through requests carrying the fault token
// (Config.FaultToken), never the queue token: a queue client that could set
// faults could throttle or redeliver for every other client.
func (e *Emulator) faultsAuthorized(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.faultBearer.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="owed-queue-faults"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, code: wire.CodeUnauthorized,
				msg: "/admin/faults takes the fault token (OWED_QUEUE_FAULT_TOKEN), not the queue token; without one set it is off"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// authorized lets through requests carrying the bearer token.
func (e *Emulator) authorized(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.bearer.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="owed-queue"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, code: wire.CodeUnauthorized, msg: "missing or wrong bearer token in the Authorization header"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// endpoint wraps h with the method check, authentication, fault injection
// and one debug log line per request.
func (e *Emulator) endpoint(method string, publish bool, h handlerFunc) http.Handler {
	return e.authorized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: wire.CodeMethodNotAllow, msg: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, method, r.Method)})
			return
		}
		f := e.faults.Load()
		f.delay(r.Context())
		if f.throttle(w, publish) {
			e.log.Debug().Str("path", r.URL.Path).Int("status", f.ThrottleStatus).Msg("queue emulator: injected throttle")
			return
		}
		data, err := h(r)
		status := http.StatusOK
		var ae *apiError
		switch {
		case err == nil:
			writeJSON(w, status, wire.Data[any]{Data: data})
		case errors.As(err, &ae):
			status = ae.status
			writeError(w, ae)
		case r.Context().Err() != nil:
			// The client went away; nobody reads an answer.
			status = 499
		default:
			status = http.StatusInternalServerError
			e.log.Error().Err(err).Str("path", r.URL.Path).Msg("queue emulator: request failed")
			writeError(w, &apiError{status: status, code: wire.CodeInternal, msg: "internal error; try again"})
		}
		e.log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Int("status", status).
			Int64("duration_ms", time.Since(start).Milliseconds()).Msg("queue emulator: request")
	}))
}

func (e *Emulator) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := e.db.PingContext(ctx); err != nil {
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: wire.CodeUnavailable, msg: "database unreachable"})
		return
	}
	writeJSON(w, http.StatusOK, wire.Data[map[string]string]{Data: map[string]string{"status": "ok"}})
}
