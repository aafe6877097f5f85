//! Completes a service's OpenAPI document with the answers the shared layers give, so
//! the contract lists every status a client can see without each route repeating them.
//!
//! [`complete`] runs in [`crate::server::finish`]. For every operation it adds, unless
//! the route documents that status itself (its own description, naming its own codes,
//! wins):
//!
//! | status | when | codes |
//! |---|---|---|
//! | 400 | the operation has parameters or a body | `INVALID_PATH`, `INVALID_QUERY`, `INVALID_HEADER`, `MALFORMED_JSON` |
//! | 401, 403 | the operation names a security requirement | `UNAUTHENTICATED`; `FORBIDDEN`, `FORBIDDEN_CALLER` |
//! | 404 | the path has a parameter (an empty segment matches no route) | `NOT_FOUND` |
//! | 413, 415, 422 | the operation takes a body | `PAYLOAD_TOO_LARGE`; `UNSUPPORTED_MEDIA_TYPE`; `INVALID_BODY` |
//! | 500 | always | `INTERNAL` |
//! | 503 | always (load shedding, the request deadline) | `OVERLOADED`, `TIMEOUT` |
//!
//! The `buyer` and `service` bearer schemes are added to the components when missing.
//! Every one of them carries the [`ErrorBody`] schema, which is added to the components
//! if the service did not reference it.

use utoipa::{
    openapi::{
        path::Operation,
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
        ContentBuilder, OpenApi, RefOr, ResponseBuilder, Schema,
    },
    PartialSchema, ToSchema,
};

use crate::error::ErrorBody;

/// Adds the shared layers' answers to every operation of `openapi` (see the module docs).
pub fn complete(openapi: &mut OpenApi) {
    let components = openapi.components.get_or_insert_with(Default::default);
    components
        .schemas
        .entry(ErrorBody::name().into_owned())
        .or_insert_with(ErrorBody::schema);
    // The two bearer schemes the routes name: a buyer token from the member service,
    // a service credential (see `auth`).
    for scheme in ["buyer", "service"] {
        let schemes = components.security_schemes.entry(scheme.to_owned());
        schemes.or_insert_with(|| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            )
        });
    }
    let global_security = openapi
        .security
        .as_ref()
        .is_some_and(|requirements| !requirements.is_empty());
    for (path, item) in openapi.paths.paths.iter_mut() {
        let path_has_param = path.contains('{');
        let item_params = item.parameters.as_ref().is_some_and(|p| !p.is_empty());
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ]
        .into_iter()
        .flatten()
        {
            complete_operation(operation, path_has_param, item_params, global_security);
        }
    }
}

fn complete_operation(
    operation: &mut Operation,
    path_has_param: bool,
    item_params: bool,
    global_security: bool,
) {
    let has_body = operation.request_body.is_some();
    let has_params = item_params || operation.parameters.as_ref().is_some_and(|p| !p.is_empty());
    let secured = match &operation.security {
        Some(requirements) => !requirements.is_empty(),
        None => global_security,
    };
    let mut add = |status: &str, description: &str| {
        operation
            .responses
            .responses
            .entry(status.to_owned())
            .or_insert_with(|| error_response(description));
    };
    if has_params || has_body || path_has_param {
        add(
            "400",
            "INVALID_PATH, INVALID_QUERY, INVALID_HEADER, MALFORMED_JSON: the request could not be read",
        );
    }
    if secured {
        add("401", "UNAUTHENTICATED: no valid token");
        add(
            "403",
            "FORBIDDEN: a token of the wrong kind; FORBIDDEN_CALLER: a service role this route does not admit",
        );
    }
    if path_has_param {
        add("404", "NOT_FOUND");
    }
    if has_body {
        add("413", "PAYLOAD_TOO_LARGE: the body is over 64 KiB");
        add(
            "415",
            "UNSUPPORTED_MEDIA_TYPE: the body is not Content-Type: application/json",
        );
        add(
            "422",
            "INVALID_BODY: the body is JSON but not of the documented shape",
        );
    }
    add("500", "INTERNAL: an internal error; it has been logged");
    add(
        "503",
        "OVERLOADED (shed) or TIMEOUT (request deadline), with Retry-After",
    );
}

fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(RefOr::<Schema>::Ref(
                    utoipa::openapi::Ref::from_schema_name(ErrorBody::name()),
                )))
                .build(),
        )
        .build()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::OpenApi as _;

    #[utoipa::path(get, path = "/v1/things/{id}", params(("id" = i64, Path)),
        responses((status = 200, description = "a thing"), (status = 404, description = "THING_NOT_FOUND")),
        security(("service" = [])))]
    #[allow(dead_code)]
    async fn thing() {}

    #[derive(utoipa::OpenApi)]
    #[openapi(paths(thing))]
    struct Doc;

    #[test]
    fn shared_answers_are_added_and_route_answers_kept() {
        let mut doc = Doc::openapi();
        complete(&mut doc);
        let op = doc.paths.paths["/v1/things/{id}"].get.as_ref().unwrap();
        let statuses: Vec<&str> = op.responses.responses.keys().map(String::as_str).collect();
        assert_eq!(
            statuses,
            ["200", "400", "401", "403", "404", "500", "503"],
            "no body: no 413/415/422"
        );
        let RefOr::T(not_found) = &op.responses.responses["404"] else {
            panic!("inline response")
        };
        assert_eq!(
            not_found.description, "THING_NOT_FOUND",
            "the route's own wins"
        );
        assert!(doc.components.unwrap().schemas.contains_key("ErrorBody"));
    }
}
