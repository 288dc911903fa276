package config

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// userinfo matches credentials in a MongoDB URI quoted inside a message: up
// to the last @ of the URI, since a malformed password may hold @, / or ?.
var userinfo = regexp.MustCompile(`(?i)(mongodb(?:\+srv)?://)[^\s"'<>]*@`)

// Redact removes credentials from a MongoDB URI so it can be logged. It
// works on malformed URIs too: when the URI does not parse cleanly,
// everything up to its last @ is treated as credentials.
func Redact(uri string) string {
	if u, err := url.Parse(uri); err == nil && u.User != nil && strings.Count(uri, "@") == 1 {
		u.User = url.User("REDACTED")
		return strings.Replace(u.String(), "REDACTED@", "***@", 1)
	}
	start, at := rawUserinfo(uri)
	if at < 0 {
		return uri
	}
	return uri[:start] + "***" + uri[at:]
}

// RedactError returns err's message with any occurrence of the URI's
// credentials removed, as written in the URI or decoded.
func RedactError(err error, uri string) string {
	msg := err.Error()
	if start, at := rawUserinfo(uri); at >= 0 {
		raw := uri[start:at]
		var secrets []string
		if u, err := url.Parse(uri); err == nil && u.User != nil {
			if p, ok := u.User.Password(); ok {
				secrets = append(secrets, p, url.QueryEscape(p), url.PathEscape(p))
			}
		}
		if _, p, ok := strings.Cut(raw, ":"); ok && p != "" {
			secrets = append(secrets, raw, p, url.QueryEscape(p), url.PathEscape(p))
			if d, err := url.PathUnescape(p); err == nil {
				secrets = append(secrets, d, url.QueryEscape(d), url.PathEscape(d))
			}
			if d, err := url.QueryUnescape(p); err == nil {
				secrets = append(secrets, d)
			}
		}
		// Longest first, so that no part of a longer form is left behind.
		slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
		for _, s := range secrets {
			if s != "" {
				msg = strings.ReplaceAll(msg, s, "***")
			}
		}
	}
	return userinfo.ReplaceAllString(msg, "${1}***@")
}

// rawUserinfo returns where the user info of uri starts (after "://", or
// at 0) and the index of the @ that ends it, or -1 when there is none.
func rawUserinfo(uri string) (start, at int) {
	at = strings.LastIndex(uri, "@")
	if at < 0 {
		return 0, -1
	}
	if i := strings.Index(uri, "://"); i >= 0 && i < at {
		start = i + len("://")
	} else if m := schemeSlash.FindStringIndex(uri); m != nil && m[1] <= at {
		start = m[1] // mongodb:/user:pass@host
	}
	return start, at
}

var schemeSlash = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9+.-]*:/+`)
