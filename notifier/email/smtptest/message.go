package smtptest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"strings"
)

// Message is one accepted message: the envelope and the raw data.
type Message struct {
	// From is the envelope sender (MAIL FROM), To the accepted recipients.
	From string
	To   []string
	// Data is the message as received after DATA, headers and body.
	Data []byte
	// Helo is the name the client greeted with.
	Helo string
	// TLS tells whether the connection was encrypted.
	TLS bool
	// User is the authenticated user name, empty without AUTH.
	User string
}

func (m Message) clone() Message {
	m.To = append([]string(nil), m.To...)
	m.Data = append([]byte(nil), m.Data...)
	return m
}

// Parse parses Data as an RFC 5322 message.
func (m Message) Parse() (*mail.Message, error) {
	return mail.ReadMessage(bytes.NewReader(m.Data))
}

// Content is a message decoded for assertions.
type Content struct {
	Header mail.Header
	// Subject is the decoded Subject header.
	Subject string
	// Text and HTML are the decoded text/plain and text/html parts (the
	// first of each, searched through nested multiparts), with line breaks
	// as "\n".
	Text, HTML string
}

// Content parses the message and decodes its subject and its text and HTML
// parts (quoted-printable or base64; UTF-8 or US-ASCII).
func (m Message) Content() (Content, error) {
	msg, err := m.Parse()
	if err != nil {
		return Content{}, err
	}
	c := Content{Header: msg.Header}
	dec := new(mime.WordDecoder)
	if c.Subject, err = dec.DecodeHeader(msg.Header.Get("Subject")); err != nil {
		return c, fmt.Errorf("smtptest: subject: %w", err)
	}
	err = c.walk(msg.Header.Get("Content-Type"), msg.Header.Get("Content-Transfer-Encoding"), msg.Body)
	return c, err
}

func (c *Content) walk(contentType, encoding string, body io.Reader) error {
	if contentType == "" {
		contentType = "text/plain; charset=us-ascii"
	}
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return fmt.Errorf("smtptest: content type %q: %w", contentType, err)
	}
	if strings.HasPrefix(mediaType, "multipart/") {
		r := multipart.NewReader(body, params["boundary"])
		for {
			p, err := r.NextRawPart()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("smtptest: %s: %w", mediaType, err)
			}
			if err := c.walk(p.Header.Get("Content-Type"), p.Header.Get("Content-Transfer-Encoding"), p); err != nil {
				return err
			}
		}
	}
	if mediaType != "text/plain" && mediaType != "text/html" {
		return nil
	}
	if cs := strings.ToLower(params["charset"]); cs != "" && cs != "utf-8" && cs != "us-ascii" {
		return fmt.Errorf("smtptest: charset %q is not supported", cs)
	}
	var r io.Reader
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "quoted-printable":
		r = quotedprintable.NewReader(body)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, body)
	case "", "7bit", "8bit", "binary":
		r = body
	default:
		return fmt.Errorf("smtptest: transfer encoding %q is not supported", encoding)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("smtptest: %s body: %w", mediaType, err)
	}
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	switch {
	case mediaType == "text/plain" && c.Text == "":
		c.Text = text
	case mediaType == "text/html" && c.HTML == "":
		c.HTML = text
	}
	return nil
}
