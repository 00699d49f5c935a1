package main

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/countersign/countersign/services/api"
)

// passkeysConfig is countersign.yaml's passkeys: block, the WebAuthn
// relying party passkeys are bound to. Absent, it follows public_url: an
// https URL's host, or localhost for a server on the loopback interface
// (the browser treats http://localhost as secure); any other http URL
// leaves passkeys off.
type passkeysConfig struct {
	// RPID is the relying party id: the inbox's host name or a parent
	// domain of it. "off" turns passkeys off.
	RPID   string `yaml:"rp_id"`
	RPName string `yaml:"rp_name"`
	// Origins are the inbox's origins; default the public URL's.
	Origins []string `yaml:"origins"`
}

// resolve is the API's passkey configuration for a server reached at
// publicURL; the second value says why passkeys are off, when they are.
func (c passkeysConfig) resolve(publicURL string) (api.PasskeyConfig, string, error) {
	if c.RPID == "off" {
		return api.PasskeyConfig{}, "passkeys.rp_id is off", nil
	}
	out := api.PasskeyConfig{RPID: c.RPID, RPName: c.RPName, Origins: c.Origins}
	u, err := url.Parse(publicURL)
	if err != nil {
		return api.PasskeyConfig{}, "", fmt.Errorf("config: passkeys: public URL %q: %v", publicURL, err)
	}
	host, port := u.Hostname(), u.Port()
	loopback := host == "localhost" || net.ParseIP(host) != nil && net.ParseIP(host).IsLoopback()
	switch {
	case out.RPID != "":
	case u.Scheme == "https":
		out.RPID = host
	case loopback:
		out.RPID = "localhost"
	default:
		return api.PasskeyConfig{}, "the public URL " + publicURL + " is neither https nor on this machine; set public_url to the inbox's https URL, or passkeys.rp_id and origins", nil
	}
	if len(out.Origins) == 0 {
		switch {
		case u.Scheme == "https":
			out.Origins = []string{"https://" + u.Host}
		case port != "":
			out.Origins = []string{"http://localhost:" + port}
		default:
			out.Origins = []string{"http://localhost"}
		}
	}
	for _, o := range out.Origins {
		ou, err := url.Parse(o)
		if err != nil || ou.Host == "" || ou.Path != "" && ou.Path != "/" {
			return api.PasskeyConfig{}, "", fmt.Errorf("config: passkeys.origins: %q is not scheme://host[:port]", o)
		}
		if h := ou.Hostname(); h != out.RPID && !strings.HasSuffix(h, "."+out.RPID) {
			return api.PasskeyConfig{}, "", fmt.Errorf("config: passkeys.origins: %q is not on %s or a subdomain of it (passkeys.rp_id)", o, out.RPID)
		}
	}
	return out, "", nil
}
