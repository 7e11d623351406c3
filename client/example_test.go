package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/owedhq/owed/client"
)

var due = time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)

func ExampleClient_Schedule() {
	c := client.New(serverURL, tenantToken)
	s, err := c.Schedule(context.Background(), client.Notification{
		Recipient: "+15550100", Channel: "sms", Kind: "follow_up", RefID: "EX-TICKET-1", DueAt: due,
		Payload: client.Payload{Text: "Any news on your ticket?"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("created:", s.Created, "state:", s.State)
	// Scheduling the same row again is idempotent.
	again, _ := c.Schedule(context.Background(), client.Notification{
		Recipient: "+15550100", Channel: "sms", Kind: "follow_up", RefID: "EX-TICKET-1", DueAt: due,
		Payload: client.Payload{Text: "Any news on your ticket?"},
	})
	fmt.Println("same id:", again.ID == s.ID, "created:", again.Created)
	// Output:
	// created: true state: pending
	// same id: true created: false
}

func ExampleClient_Event() {
	c := client.New(serverURL, serviceToken, client.WithTenant("acme"))
	res, err := c.Event(context.Background(), client.Event{
		Kind: "shipment_exception", RefID: "EX-SHIP-1", Channel: "email",
		Payload:    client.Payload{Subject: "Your parcel is delayed", Text: "It is held at customs."},
		OccurredAt: due, Delay: 5 * time.Minute, ExpiresIn: 24 * time.Hour,
		Recipients: []client.EventRecipient{{Recipient: "ana@example.com"}, {Recipient: "ben@example.com"},
			{Recipient: "+15550101", Channel: "sms", Payload: &client.Payload{Text: "Parcel delayed at customs."}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("created:", res.Created)
	for _, n := range res.Notifications {
		fmt.Println(n.Recipient, n.State)
	}
	// Output:
	// created: 3
	// ana@example.com pending
	// ben@example.com pending
	// +15550101 pending
}

func ExampleClient_All() {
	ctx := context.Background()
	c := client.New(serverURL, tenantToken)
	for i := range 5 {
		c.Schedule(ctx, client.Notification{Recipient: fmt.Sprintf("+1555020%d", i), Channel: "sms", Kind: "nudge",
			RefID: "EX-LIST", DueAt: due.Add(time.Duration(i) * time.Hour), Payload: client.Payload{Text: "hi"}})
	}
	// Two rows a page, newest due first; All follows next_cursor.
	for row, err := range c.All(ctx, client.ListOptions{RefID: "EX-LIST", Limit: 2}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(row.Recipient, row.DueAt.Format(time.Kitchen))
	}
	// Output:
	// +15550204 1:00PM
	// +15550203 12:00PM
	// +15550202 11:00AM
	// +15550201 10:00AM
	// +15550200 9:00AM
}

func ExampleClient_Reschedule() {
	ctx := context.Background()
	c := client.New(serverURL, tenantToken)
	c.Schedule(ctx, client.Notification{Recipient: "+15550300", Channel: "sms", Kind: "meeting_soon",
		RefID: "EX-MEETING-1", DueAt: due, Payload: client.Payload{Text: "Meeting in 10 minutes"}})
	moved, err := c.Reschedule(ctx, "meeting_soon", "EX-MEETING-1", due.Add(time.Hour))
	fmt.Println("moved:", moved.Changed, err)
	cancelled, err := c.Cancel(ctx, "meeting_soon", "EX-MEETING-1")
	fmt.Println("cancelled:", cancelled.Changed, err)
	// Output:
	// moved: 1 <nil>
	// cancelled: 1 <nil>
}

func ExampleIsNotFound() {
	c := client.New(serverURL, tenantToken)
	_, err := c.Get(context.Background(), 999999999)
	fmt.Println(client.IsNotFound(err))
	// Output: true
}

func ExampleError() {
	c := client.New(serverURL, tenantToken)
	_, err := c.Schedule(context.Background(), client.Notification{Recipient: "+15550400", Channel: "fax",
		Kind: "k", RefID: "EX-BAD", DueAt: due, Payload: client.Payload{Text: "hi"}})
	if e, ok := err.(*client.Error); ok {
		fmt.Println(e.Status, e.Code, e.Field)
	}
	// Output: 400 invalid_field notifications[0].channel
}
