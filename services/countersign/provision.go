package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/countersign/countersign/events"
)

// cmdProvision creates or updates the streams and buckets on an external
// NATS server or cluster, as its admin user. Role processes then run with
// their own least-privilege users (nats.provision is off against an
// external server).
func cmdProvision(args []string, out io.Writer) error {
	fs := newFlagSet("provision", out)
	natsURL := fs.String("nats-url", os.Getenv("COUNTERSIGN_NATS_URL"), "NATS server URLs, comma-separated")
	user := fs.String("user", firstNonEmpty(os.Getenv("COUNTERSIGN_NATS_USER"), "admin"), "NATS user (the admin role)")
	creds := fs.String("creds", os.Getenv("COUNTERSIGN_NATS_CREDS"), "NATS credentials file instead of user and password")
	replicas := fs.Int("replicas", 0, "replicas of every stream and bucket: 0 picks 3 on a cluster of three or more nodes, else 1")
	retention := fs.Duration("retention", 720*time.Hour, "how long records and events are kept")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *natsURL == "" {
		return fmt.Errorf("provision: --nats-url (or COUNTERSIGN_NATS_URL) is required")
	}
	opts := []nats.Option{nats.Name("countersign-provision")}
	switch {
	case *creds != "":
		opts = append(opts, nats.UserCredentials(*creds))
	case *user != "":
		opts = append(opts, nats.UserInfo(*user, os.Getenv("COUNTERSIGN_NATS_PASSWORD")))
	}
	nc, err := nats.Connect(*natsURL, opts...)
	if err != nil {
		return fmt.Errorf("provision: connect %s: %w", redactURLs(*natsURL), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	r := *replicas
	if r == 0 {
		r = autoReplicas(nc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := events.Provision(ctx, js, events.ProvisionConfig{Replicas: r, Retention: *retention}); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	fmt.Fprintf(out, "Streams and buckets are provisioned with %d replica(s) on %s.\n", r, redactURLs(*natsURL))
	return nil
}
