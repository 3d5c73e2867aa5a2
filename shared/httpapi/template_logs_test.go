package httpapi_test

import (
	"fmt"
	"reflect"
	"testing"
)

// The log bucket is closed to everyone but the functions' roles and the URLs they sign: no
// public access, TLS only, encrypted at rest; its lifecycle rule expires what retention would
// have the reaper delete, and none when runs are kept forever; CORS lets the console's origin,
// and no other, read what it holds URLs for; each function's policy on it is what its code
// does with it, and no more.
func TestTemplateLogBucket(t *testing.T) {
	t.Parallel()
	tpl := readCFN(t, "../../template.yaml")
	eval := func(t *testing.T, params map[string]string, path ...string) any {
		t.Helper()
		values, err := parameterValues(tpl, params)
		if err != nil {
			t.Fatal(err)
		}
		conditions, _ := cfnAt(tpl, "Conditions").(map[string]any)
		v, err := cfnEval{params: values, conditions: conditions}.eval(cfnAt(tpl, append([]string{"Resources"}, path...)...))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	bucket := eval(t, passwordMode, "LogBucket")
	if got := cfnAt(bucket, "Properties", "BucketEncryption"); fmt.Sprint(got) != "map[ServerSideEncryptionConfiguration:[map[ServerSideEncryptionByDefault:map[SSEAlgorithm:AES256]]]]" {
		t.Errorf("encryption %v, want SSE-S3", got)
	}
	if got := cfnAt(bucket, "Properties", "PublicAccessBlockConfiguration"); fmt.Sprint(got) != "map[BlockPublicAcls:true BlockPublicPolicy:true IgnorePublicAcls:true RestrictPublicBuckets:true]" {
		t.Errorf("public access block %v, want every one on", got)
	}
	if got := cfnAt(bucket, "DeletionPolicy"); got != "Retain" {
		t.Errorf("DeletionPolicy %v: a stack deleted with logs in the bucket would fail to delete it", got)
	}

	statements, _ := cfnAt(eval(t, passwordMode, "LogBucketPolicy"), "Properties", "PolicyDocument", "Statement").([]any)
	tlsOnly := false
	for _, s := range statements {
		if cfnAt(s, "Effect") == "Deny" && cfnAt(s, "Principal") == "*" && cfnAt(s, "Action") == "s3:*" &&
			cfnAt(s, "Condition", "Bool", "aws:SecureTransport") == "false" && len(toAnys(cfnAt(s, "Resource"))) == 2 {
			tlsOnly = true
		}
	}
	if !tlsOnly {
		t.Errorf("the bucket policy %v denies no request without TLS, to the bucket and its objects", statements)
	}

	for days, rule := range map[string]string{
		"30": "map[Rules:[map[ExpirationInDays:30 Id:step-logs-past-retention Status:Enabled]]]",
		"7":  "map[Rules:[map[ExpirationInDays:7 Id:step-logs-past-retention Status:Enabled]]]",
		"0":  "<nil>",
	} {
		got := cfnAt(eval(t, withParams(passwordMode, "RunRetentionDays", days), "LogBucket"), "Properties", "LifecycleConfiguration")
		if fmt.Sprint(got) != rule {
			t.Errorf("RunRetentionDays=%s: lifecycle %v, want %s", days, got, rule)
		}
	}
	for origin, cors := range map[string]string{
		"https://console.example.com": "map[CorsRules:[map[AllowedHeaders:[Range] AllowedMethods:[GET HEAD] AllowedOrigins:[https://console.example.com] ExposedHeaders:[Content-Length Content-Range ETag] MaxAge:3600]]]",
		"":                            "<nil>",
	} {
		got := cfnAt(eval(t, withParams(passwordMode, "ConsoleOrigin", origin), "LogBucket"), "Properties", "CorsConfiguration")
		if fmt.Sprint(got) != cors {
			t.Errorf("ConsoleOrigin=%q: CORS %v, want %s", origin, got, cors)
		}
	}

	// Each policy's actions, by the resource they are on: the bucket (listing) or its objects.
	for policy, actions := range map[string]map[string]string{
		"LogWritePolicy": {"objects": "s3:PutObject"},
		"LogReadPolicy":  {"bucket": "s3:ListBucket", "objects": "s3:GetObject"},
		"LogPrunePolicy": {"bucket": "s3:ListBucket", "objects": "s3:DeleteObject"},
	} {
		got := map[string]string{}
		for _, s := range toAnys(cfnAt(eval(t, passwordMode, policy), "Properties", "PolicyDocument", "Statement")) {
			on := "?"
			switch r := cfnAt(s, "Resource"); {
			case fmt.Sprint(r) == "map[Fn::GetAtt:[LogBucket Arn]]" || fmt.Sprint(r) == "map[Fn::GetAtt:LogBucket.Arn]":
				on = "bucket"
			case fmt.Sprint(r) == "map[Fn::Sub:${LogBucket.Arn}/*]":
				on = "objects"
			}
			if cfnAt(s, "Effect") != "Allow" || got[on] != "" {
				on = "?"
			}
			got[on] = fmt.Sprint(cfnAt(s, "Action"))
		}
		if !reflect.DeepEqual(got, actions) {
			t.Errorf("%s allows %v, want %v", policy, got, actions)
		}
	}
}
