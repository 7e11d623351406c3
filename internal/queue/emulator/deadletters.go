package emulator

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/owedhq/owed/internal/queue/wire"
)

// The dead-letter endpoints: list, look up, redrive and delete.

func (e *Emulator) deadLetters(r *http.Request, queue string) (any, error) {
	q := r.URL.Query()
	limit := defaultDeadLetterPage
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, invalid("limit", "%q is not a number; want 1..%d", s, wire.MaxDeadLetterPage)
		}
		if aerr := checkRange("limit", n, 1, wire.MaxDeadLetterPage); aerr != nil {
			return nil, aerr
		}
		limit = n
	}
	var after int64
	if s := q.Get("cursor"); s != "" {
		c, ok := parseID(s)
		if !ok {
			return nil, invalid("cursor", "%q is not a cursor this queue issued; pass next_cursor from the previous page", s)
		}
		after = c
	}
	var ids []int64
	if s := q.Get("ids"); s != "" {
		var aerr *apiError
		if ids, aerr = parseIDs("ids", strings.Split(s, ",")); aerr != nil {
			return nil, aerr
		}
	}
	list, next, err := e.store.deadLetters(r.Context(), queue, after, limit, ids)
	if err != nil {
		return nil, err
	}
	return wire.DeadLettersResponse{DeadLetters: list, NextCursor: next}, nil
}

func (e *Emulator) deadLetter(r *http.Request, queue string) (any, error) {
	raw := r.PathValue("id")
	if id, ok := parseID(raw); ok {
		list, _, err := e.store.deadLetters(r.Context(), queue, 0, 1, []int64{id})
		if err != nil {
			return nil, err
		}
		if len(list) == 1 {
			return list[0], nil
		}
	}
	return nil, notFound("message %q is not a dead letter of queue %q", raw, queue)
}

func (e *Emulator) redrive(r *http.Request, req *wire.RedriveRequest) (any, error) {
	if req.All == (len(req.MessageIDs) > 0) {
		return nil, invalid("message_ids", "give either message_ids or all: true, not both or neither")
	}
	ids, aerr := parseIDs("message_ids", req.MessageIDs)
	if aerr != nil {
		return nil, aerr
	}
	n, err := e.store.redrive(r.Context(), req.Queue, ids, req.All)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		e.waiters.notify(req.Queue)
	}
	return wire.RedriveResponse{Redriven: n}, nil
}

func (e *Emulator) deleteDeadLetters(r *http.Request, req *wire.DeleteDeadLettersRequest) (any, error) {
	if len(req.MessageIDs) == 0 {
		return nil, invalid("message_ids", "is required; want the ids of the dead letters to delete")
	}
	ids, aerr := parseIDs("message_ids", req.MessageIDs)
	if aerr != nil {
		return nil, aerr
	}
	n, err := e.store.deleteDeadLetters(r.Context(), req.Queue, ids)
	if err != nil {
		return nil, err
	}
	return wire.DeleteDeadLettersResponse{Deleted: n}, nil
}
