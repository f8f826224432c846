// Package httppath reads request targets for the proxy: it splits a
// request-target into host, path and query, and normalises the path.
//
// The gateway routes and forwards one and the same path: the request's path
// normalised by Normalize. Backends differ in how they read a path
// (decoding, case, matrix parameters, backslashes), so anything that two
// readings could disagree on is either made canonical here or refused (the
// proxy answers 400 with the Error's text):
//
//   - percent-encoded unreserved characters (letters, digits, "-", "_", "~")
//     are decoded; every other escape is kept, with upper-case hex digits;
//   - "." and ".." segments are removed (".." never climbs above "/") and
//     runs of "/" are merged;
//   - refused: a path that is not absolute, an invalid escape, a control
//     character or NUL (raw or encoded), a backslash (raw or encoded), an
//     encoded "/" or "." (they would change the path's structure once a
//     backend decodes them), the same escaped twice ("%252e"), a dot
//     segment with parameters ("..;x", which some servers read as ".."),
//     a segment that starts or ends with an encoded space, and a "#".
//
// The functions are pure, run on the request path and allocate nothing
// beyond growing the dst they are given.
package httppath
