package apitest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vErrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"

	"mediator/localdev/gateway"
	"mediator/localdev/openapicheck"
	"mediator/shared/auth"
	"mediator/shared/httpapi"
)

// Contract checks exchanges with the handlers against the OpenAPI document
// (shared/httpapi/openapi.yaml). Every Env.Do and Env.Invoke goes through it: a response the
// document does not describe — a field it lacks, a status it does not list, a missing
// Retry-After — fails the test whatever the status, and so does an accepted (2xx) request the
// document would not allow. A refused request is not checked: the hostile tests send invalid
// ones on purpose, and only their answers must be as documented.
type Contract struct {
	v       validator.Validator
	problem *base.Schema
	schemas schema_validation.SchemaValidator
	routes  *gateway.Gateway
}

// TheContract is the document's validator, built once per test binary: compiling the
// document's schemas costs far more than a test's requests do.
var TheContract = sync.OnceValues(func() (*Contract, error) { return NewContract(httpapi.OpenAPI) })

// NewContract builds the validator for an OpenAPI document.
func NewContract(doc []byte) (*Contract, error) {
	d, err := libopenapi.NewDocumentWithConfiguration(doc, openapicheck.Quiet())
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(d,
		config.WithFormatAssertions(),
		config.WithAuthenticationFunc(authenticate),
		config.WithRejectUndeclaredRequestBody(),
	)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m, err := d.BuildV3Model()
	if err != nil {
		return nil, err
	}
	problem := m.Model.Components.Schemas.GetOrZero("Problem")
	if problem == nil {
		return nil, errors.New("the document has no Problem schema")
	}
	return &Contract{v: v, problem: problem.Schema(), schemas: schema_validation.NewSchemaValidator(),
		routes: &gateway.Gateway{Routes: httpapi.Routes}}, nil
}

// principalKey carries, in the request's context, the caller the handler saw.
type principalKey struct{}

// caller is the principal the handler found in an event, and the scheme of the document that
// stands for the authorizer that put it there: iam for API Gateway's IAM authorizer, jwt for its
// JWT authorizer, devToken for the Lambda authorizer context the local gateway writes.
type caller struct {
	who    auth.Principal
	scheme string
}

// authenticate plays the part of the deployed authorizers for the validator: the principal
// the handler saw must come from an authorizer the route's security requirement names, and be
// of a kind it lists — for jwt as the scope mediator/<kind>, for iam and devToken as the role
// <kind>. A 2xx answered to a kind the document does not allow on that route, or through an
// authorizer it does not put there (a JWT on a node route), fails the test.
func authenticate(ctx context.Context, in *config.AuthenticationInput) error {
	c, _ := ctx.Value(principalKey{}).(caller)
	if c.who.Kind == "" {
		return errors.New("no principal")
	}
	if in.SecuritySchemeName != c.scheme {
		return fmt.Errorf("a principal of the %s authorizer, not %s", c.scheme, in.SecuritySchemeName)
	}
	want := string(c.who.Kind)
	if in.SecurityScheme != nil && strings.EqualFold(in.SecurityScheme.Type, "openIdConnect") {
		want = "mediator/" + want
	}
	if !slices.Contains(in.Scopes, want) {
		return fmt.Errorf("a %s principal is not one %s lists (%v)", c.who.Kind, in.SecuritySchemeName, in.Scopes)
	}
	return nil
}

// schemeOf names the document's security scheme for the authorizer that wrote an event's
// context.
func schemeOf(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) string {
	switch {
	case a == nil:
		return ""
	case a.Lambda != nil:
		return "devToken"
	case a.JWT != nil:
		return "jwt"
	case a.IAM != nil:
		return "iam"
	}
	return ""
}

// Check returns what the document says is wrong with one exchange: an event as API Gateway
// sends it and the handler's response. Nothing is wrong when it returns nil. It reads the
// principal as a handler configured with no IAM roles and no admin group does, which is all the
// local gateway's events need; CheckWith reads it with the settings given.
func (c *Contract) Check(ev events.APIGatewayV2HTTPRequest, resp events.APIGatewayV2HTTPResponse) []string {
	return c.CheckWith(auth.Settings{}, ev, resp)
}

// CheckWith is Check, reading the principal with the settings the handler had (its config.Auth).
func (c *Contract) CheckWith(set auth.Settings, ev events.APIGatewayV2HTTPRequest, resp events.APIGatewayV2HTTPResponse) []string {
	body, err := responseBody(resp)
	if err != nil {
		return []string{err.Error()}
	}
	method, path := ev.RequestContext.HTTP.Method, ev.RawPath
	if path == "" {
		path = ev.RequestContext.HTTP.Path
	}
	// An event whose route key is not the route its method and path match is not one API
	// Gateway sends (the hostile tests forge them to reach a handler's own guard): it is no
	// operation of the document, and its answer must simply be a problem.
	if route, _, ok := c.routes.Match(method, path); !ok || route.Key() != ev.RouteKey {
		if resp.Headers["content-type"] != "application/problem+json" {
			return []string{fmt.Sprintf("a misrouted event (%q for %s %s) answered %q, not a problem", ev.RouteKey, method, path, resp.Headers["content-type"])}
		}
		_, errs := c.schemas.ValidateSchemaBytes(c.problem, body)
		return describe("response", errs)
	}
	var out []string
	req := request(ev, set)
	hr := &http.Response{StatusCode: resp.StatusCode, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)), Request: req}
	for k, v := range resp.Headers {
		hr.Header.Set(k, v)
	}
	if ok, errs := c.v.ValidateHttpResponse(req, hr); !ok {
		out = append(out, describe(fmt.Sprintf("%d response", resp.StatusCode), errs)...)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if ok, errs := c.v.ValidateHttpRequestSync(request(ev, set)); !ok {
			out = append(out, describe("accepted request", errs)...)
		}
	}
	return out
}

// request is the HTTP request the event stands for, as the client sent it, with the principal
// the handler finds in the event under set.
func request(ev events.APIGatewayV2HTTPRequest, set auth.Settings) *http.Request {
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		if b, err := base64.StdEncoding.DecodeString(ev.Body); err == nil {
			body = b
		}
	}
	u := &url.URL{Scheme: "http", Host: "mediator.test", Path: ev.RawPath, RawQuery: ev.RawQueryString}
	if u.Path == "" {
		u.Path = ev.RequestContext.HTTP.Path
	}
	if u.RawQuery == "" && len(ev.QueryStringParameters) > 0 {
		q := url.Values{}
		for k, v := range ev.QueryStringParameters {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
	}
	ctx := context.Background()
	if who, ok := auth.FromRequest(ev, set); ok {
		ctx = context.WithValue(ctx, principalKey{}, caller{who, schemeOf(ev.RequestContext.Authorizer)})
	}
	// Built field by field rather than parsed: a hostile test's query string need not parse.
	req := (&http.Request{Method: ev.RequestContext.HTTP.Method, URL: u, Host: u.Host, Header: http.Header{},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body))}).WithContext(ctx)
	for k, v := range ev.Headers {
		req.Header.Set(k, v)
	}
	return req
}

func responseBody(resp events.APIGatewayV2HTTPResponse) ([]byte, error) {
	if !resp.IsBase64Encoded {
		return []byte(resp.Body), nil
	}
	b, err := base64.StdEncoding.DecodeString(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the response body is not valid base64: %w", err)
	}
	return b, nil
}

// describe writes the validator's findings one per line, each with where it is.
func describe(what string, errs []*vErrors.ValidationError) []string {
	var out []string
	for _, e := range errs {
		line := what + ": " + e.Message
		if e.Reason != "" && e.Reason != e.Message {
			line += " (" + e.Reason + ")"
		}
		for _, f := range e.SchemaValidationErrors {
			where := f.FieldPath
			if where == "" {
				where = "/" + strings.Join(f.InstancePath, "/")
			}
			line += fmt.Sprintf("\n\t%s: %s", where, f.Reason)
		}
		out = append(out, line)
	}
	return out
}
