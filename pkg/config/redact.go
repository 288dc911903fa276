package config

import (
	"net/url"
	"regexp"
	"strings"
)

var userinfo = regexp.MustCompile(`(mongodb(?:\+srv)?://)[^@/]*@`)

// Redact removes credentials from a MongoDB URI so it can be logged. It
// works on malformed URIs too.
func Redact(uri string) string {
	if u, err := url.Parse(uri); err == nil && u.User != nil {
		u.User = url.User("REDACTED")
		return strings.Replace(u.String(), "REDACTED@", "***@", 1)
	}
	return userinfo.ReplaceAllString(uri, "${1}***@")
}

// RedactError returns err's message with any occurrence of the URI's
// credentials removed.
func RedactError(err error, uri string) string {
	msg := err.Error()
	if u, perr := url.Parse(uri); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "***")
			msg = strings.ReplaceAll(msg, url.QueryEscape(p), "***")
		}
	}
	return userinfo.ReplaceAllString(msg, "${1}***@")
}
