// Package auth authenticates the callers of a silo's gateway and admin
// server: bearer tokens from a token file ("TOKEN PRINCIPAL" lines,
// re-read when it changes), and the subject of a verified client
// certificate.
//
// It imports zap and the clock only.
package auth
