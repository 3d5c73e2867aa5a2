// Command migrate applies the schema migrations; run it before the other functions serve.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"mediator/shared/migrator"
	"mediator/shared/startup"
)

func main() {
	d := startup.InitMigrator("migrate")
	lambda.Start(migrator.Handler(d.Store, d.Log))
}
