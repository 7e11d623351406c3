package rest

import (
	"fmt"
	"time"
)

// APIError is a request the queue answered with an error body. Use
// errors.As to read it:
//
//	var apiErr *queue.APIError
//	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound { … }
type APIError struct {
	// Op is the client operation, e.g. "publish".
	Op string
	// Status is the HTTP status code.
	Status int
	// Code and Message are the server's, from {"error": {…}}.
	Code    string
	Message string
	// Retryable is the server's hint that the same request may succeed later.
	Retryable bool
	// RetryAfter is the server's Retry-After, zero when it sent none.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("queue %s: HTTP %d %s: %s", e.Op, e.Status, e.Code, e.Message)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return s
}
