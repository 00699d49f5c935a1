package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/notifier"
)

// DefaultAPIURL is the base of Slack's Web API.
const DefaultAPIURL = "https://slack.com/api/"

// defaultRetryAfter is the wait asked for when Slack rate-limits a call
// without saying for how long.
const defaultRetryAfter = 5 * time.Second

// maxReplyBytes bounds what is read of a Web API reply.
const maxReplyBytes = 1 << 20

// APIError is a Web API call that Slack answered with "ok": false.
type APIError struct {
	// Method is the Web API method, e.g. "chat.postMessage".
	Method string
	// Code is Slack's error code, e.g. "channel_not_found".
	Code string
	// Messages are Slack's details (response_metadata.messages), e.g.
	// which block is invalid.
	Messages []string
}

func (e *APIError) Error() string {
	s := "slack: " + e.Method + ": " + e.Code
	if len(e.Messages) > 0 {
		s += " (" + strings.Join(e.Messages, "; ") + ")"
	}
	return s
}

// permanentCodes are Slack errors a retry cannot fix: authentication, the
// destination, or the message itself.
var permanentCodes = map[string]bool{
	"invalid_auth": true, "not_authed": true, "account_inactive": true, "token_revoked": true,
	"token_expired": true, "no_permission": true, "missing_scope": true, "not_allowed_token_type": true,
	"team_access_not_granted": true, "ekm_access_denied": true, "restricted_action": true,
	"channel_not_found": true, "is_archived": true, "not_in_channel": true, "user_not_found": true,
	"cannot_dm_bot": true, "user_disabled": true,
	"invalid_blocks": true, "invalid_blocks_format": true, "msg_too_long": true, "no_text": true,
	"too_many_attachments": true, "invalid_arguments": true, "invalid_arg_name": true,
	"invalid_json": true, "json_not_object": true, "invalid_form_data": true,
	"message_not_found": true, "cant_update_message": true, "edit_window_closed": true,
	"invalid_trigger_id": true, "expired_trigger_id": true, "exchanged_trigger_id": true,
	"view_too_large": true, "duplicate_external_id": true,
}

// reply is the part of a Web API reply Countersign reads.
type reply struct {
	OK               bool   `json:"ok"`
	Error            string `json:"error"`
	Channel          string `json:"channel"`
	TS               string `json:"ts"`
	ResponseMetadata struct {
		Messages []string `json:"messages"`
	} `json:"response_metadata"`
}

// apiClient calls Slack's Web API with a bot token. Nothing it logs or
// returns holds the token.
type apiClient struct {
	base  string
	token string
	http  *http.Client
	now   func() time.Time
}

// call POSTs body as JSON to method and classifies failures: errors
// wrapping notifier.ErrPermanent for what a retry cannot fix,
// notifier.RetryAfter for rate limits, plain errors for the rest.
func (c *apiClient) call(ctx context.Context, method string, body any) (*reply, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: slack: %s: encoding the call: %v", notifier.ErrPermanent, method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+method, bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: slack: %s: cannot build the request", notifier.ErrPermanent, method)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("slack: %s: %w", method, unwrapURLError(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return nil, fmt.Errorf("slack: %s: reading the reply: %w", method, err)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return nil, notifier.RetryAfter(c.retryAfter(resp.Header), fmt.Errorf("slack: %s: HTTP 429, rate limited", method))
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout:
		return nil, fmt.Errorf("slack: %s: HTTP %d", method, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: slack: %s: HTTP %d", notifier.ErrPermanent, method, resp.StatusCode)
	}
	var r reply
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("slack: %s: the reply is not JSON", method)
	}
	if r.OK {
		return &r, nil
	}
	apiErr := &APIError{Method: method, Code: r.Error, Messages: r.ResponseMetadata.Messages}
	if apiErr.Code == "" {
		apiErr.Code = "unknown_error"
	}
	switch {
	case apiErr.Code == "ratelimited":
		return nil, notifier.RetryAfter(c.retryAfter(resp.Header), apiErr)
	case permanentCodes[apiErr.Code]:
		return nil, fmt.Errorf("%w: %w", notifier.ErrPermanent, apiErr)
	default:
		return nil, apiErr
	}
}

// retryAfter reads Retry-After: seconds or an HTTP date.
func (c *apiClient) retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return defaultRetryAfter
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(c.now()), 0)
	}
	return defaultRetryAfter
}

// unwrapURLError drops the URL from a transport error: a response_url is a
// credential of sorts and does not belong in logs.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// postJSON POSTs msg to a response_url. It needs no token: the URL is the
// credential.
func postJSON(ctx context.Context, hc *http.Client, target string, msg any) error {
	raw, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("slack: response_url: encoding: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(raw))
	if err != nil {
		return errors.New("slack: response_url: cannot build the request")
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("slack: response_url: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("slack: response_url: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return nil
}

// validAPIURL reports whether s can be the Web API base: an absolute http or
// https URL.
func validAPIURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.RawQuery == "" && u.Fragment == ""
}

// apiBase is s with a trailing slash, so methods can be appended.
func apiBase(s string) string {
	if !strings.HasSuffix(s, "/") {
		s += "/"
	}
	return s
}
