// Package inbox is Countersign's web inbox: the pages where people list the
// requests waiting for them, read one with its arguments and timeline, and
// decide it, with live updates, and no script or style from anywhere else.
//
// The inbox holds no records of its own and writes none. It is served on
// the API's server (New registers its routes there) and asks the API,
// through Backend, for everything it shows or does: who a session's token
// belongs to, the records and timelines the person may read, the live feed,
// and the vote path, so a page can show or do nothing the JSON API would
// not allow the same token.
//
// People sign in with their API token, which is exchanged for a session.
// Sessions live in the hitl_sessions bucket, so every replica knows every
// session (no sticky load balancing), a restart signs nobody out, and a
// sign-out on one replica ends the session on all. The bucket holds
// neither the session id nor the token: its key is the SHA-256 of the
// session id, its value the SHA-256 of the token, looked up again on every
// request, so a token removed from the configuration or the directory ends
// its sessions at once. With Config.OIDC, people also sign in through an
// OpenID Connect provider (oidc.go): such a session holds its person's
// directory id, is matched to the live directory again on every request
// (a person removed there has no session from that moment), and lasts
// while the provider's ID token does or the provider refreshes it. Who
// someone is comes from the provider; what they may do, from the
// directory, which the provider's claims only narrow. Every POST carries
// the session's CSRF token, and every answer a strict
// Content-Security-Policy.
package inbox
