package email_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/countersign/countersign/notifier"
	"github.com/countersign/countersign/notifier/email"
)

// ExampleParseKey reads a link key from configuration, signs a personal
// link and verifies it, as the confirmation page does. The vote id is
// pinned: links already sent must keep theirs across versions.
func ExampleParseKey() {
	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) // openssl rand -base64 32
	key, err := email.ParseKey("2026-07:" + secret)
	if err != nil {
		log.Fatal(err)
	}
	links, err := email.NewLinks([]email.Key{key})
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)
	token, err := links.Sign(email.Claims{
		EventID: "0190d1a2-7b3c-7def-8123-456789abcdef", Approver: "alice",
		Expires: now.Add(time.Hour), Nonce: "example-nonce",
	})
	if err != nil {
		log.Fatal(err)
	}
	claims, err := links.Verify(token, now)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(claims.Approver, claims.Expires.Format(time.RFC3339))
	fmt.Println("vote id:", email.VoteID(claims))
	_, err = links.Verify(token, now.Add(2*time.Hour))
	fmt.Println(err)
	// Output:
	// alice 2026-07-01T11:00:00Z
	// vote id: 923105fa-43e8-5154-8f43-ebd3ce92887e
	// email: link token expired
}

// ExampleNewPages wires the channel and its confirmation pages: the notifier
// calls the channel, the HTTP server mounts the pages under /e/.
func ExampleNewPages() {
	key, err := email.ParseKey("2026-07:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		log.Fatal(err)
	}
	links, err := email.NewLinks([]email.Key{key})
	if err != nil {
		log.Fatal(err)
	}
	var ch notifier.Channel
	ch, err = email.New(email.Config{
		SMTP:      email.SMTPConfig{Host: "smtp.example.com", Username: "countersign", Password: "from-a-secret-store"},
		From:      "Countersign <approvals@example.com>",
		PublicURL: "https://countersign.example.com",
		Links:     links,
	})
	if err != nil {
		log.Fatal(err)
	}
	var resolver notifier.Resolver // the HTTP API's, which reads records and votes over the bus
	pages, err := email.NewPages(email.PagesConfig{Links: links, Resolver: resolver})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/e/", pages)
	_ = ch // handed to the notifier runtime
}
