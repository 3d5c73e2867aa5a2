package problem_test

import (
	"testing"

	"mediator/shared/problem"
)

// Each code has its one status, a type naming it, and a title; an unknown code is internal.
func TestCodes(t *testing.T) {
	t.Parallel()
	titles := map[string]string{}
	for code, status := range map[string]int{
		problem.InvalidRequest: 400, problem.Unauthenticated: 401, problem.Forbidden: 403, problem.NotFound: 404, problem.LogsNotStored: 404,
		problem.RunIDConflict: 409, problem.StaleAssignment: 409, problem.NotRunnable: 409, problem.ResultConflict: 409,
		problem.RunNotLive: 409, problem.NotAHold: 409, problem.PayloadTooLarge: 413, problem.UnsupportedMediaType: 415,
		problem.Internal: 500, problem.Unavailable: 503,
	} {
		p := problem.New(code, "detail")
		if p.Code != code || p.Status != status || p.Type != "/problems/"+code || p.Detail != "detail" || p.Title == "" {
			t.Errorf("%s: %+v, want status %d", code, p, status)
		}
		if other, dup := titles[p.Title]; dup {
			t.Errorf("%s and %s share the title %q", code, other, p.Title)
		}
		titles[p.Title] = code
	}
	if p := problem.New("no_such_code", "x"); p.Code != problem.Internal || p.Status != 500 {
		t.Errorf("an unknown code: %+v", p)
	}
	p := problem.Invalid([]problem.FieldError{{Path: "a", Message: "b"}, {Path: "c", Message: "d"}})
	if p.Status != 400 || len(p.Errors) != 2 || p.Detail != "2 problem(s) with the request; see errors" {
		t.Errorf("Invalid: %+v", p)
	}
}
