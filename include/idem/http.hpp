// The HTTP protocol layer: what a server needs around an idempotent wrapper to speak the IETF
// Idempotency-Key draft (draft-ietf-httpapi-idempotency-key-header) and RFC 9457, whatever server
// library it runs on. Standard library only; the server bindings are headers of their own
// (idem/http/httplib.hpp, idem/http/beast.hpp) and need their libraries.
//
//   idempotency_key.hpp  the Idempotency-Key field read (sf-string or bare) and written
//   deadline.hpp         the caller's deadline (Request-Timeout-Ms) read and written
//   conditional.hpp      If-Match against a resource's version: idempotence without a key
//   problem.hpp          refusals as application/problem+json, a stable type per refusal
//   specification.hpp    the idempotency specification a resource publishes, as HTML and JSON
//   exchange.hpp         one exchange: key read, wrapper called, outcome written
//   framing.hpp          strict request framing (RFC 9112): what is refused before a body is read
//   webhook.hpp          webhooks received: signature and timestamp checked, one effect per event
#ifndef IDEM_HTTP_HPP
#define IDEM_HTTP_HPP

#include <idem/http/conditional.hpp>
#include <idem/http/deadline.hpp>
#include <idem/http/exchange.hpp>
#include <idem/http/framing.hpp>
#include <idem/http/idempotency_key.hpp>
#include <idem/http/problem.hpp>
#include <idem/http/specification.hpp>
#include <idem/http/webhook.hpp>

#endif  // IDEM_HTTP_HPP
