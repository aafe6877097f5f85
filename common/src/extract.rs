//! Extractors whose rejections speak the common error body instead of plain text.

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection, QueryRejection},
        FromRequest, FromRequestParts,
    },
    http::StatusCode,
};

use crate::error::{codes, ApiError};

/// `axum::Json` with rejections mapped to 400/415/413/422 and a code.
///
/// A number with an integral value is an integer whatever its spelling, as JSON Schema
/// counts it (`5.0` is an `integer`). The body is parsed once, straight into `T`; only a
/// body `T` refuses is read again as JSON with such numbers rewritten as integers, so
/// the common case (every batch between services) pays for one parse. `5.5` is still
/// refused where an integer is expected.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                codes::UNSUPPORTED_MEDIA_TYPE,
                "expected Content-Type: application/json",
            ));
        }
        // The route's body limit applies here, as it does to axum's own extractor.
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    codes::PAYLOAD_TOO_LARGE,
                    "request body could not be read or is too large",
                )
            })?;
        let refused = match serde_json::from_slice::<T>(&bytes) {
            Ok(value) => return Ok(Json(value)),
            Err(e) if e.is_data() => e,
            Err(e) => {
                return Err(ApiError::bad_request(
                    codes::MALFORMED_JSON,
                    format!("Failed to parse the request body as JSON: {e}"),
                ))
            }
        };
        let invalid = |e: &serde_json::Error| {
            ApiError::unprocessable(
                codes::INVALID_BODY,
                format!("Failed to deserialize the JSON body into the target type: {e}"),
            )
        };
        let mut value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|_| invalid(&refused))?;
        integral_numbers_as_integers(&mut value);
        serde_json::from_value(value)
            .map(Json)
            .map_err(|_| invalid(&refused))
    }
}

/// `application/json` or any `application/*+json`, parameters ignored.
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("application", sub)) => sub == "json" || sub.ends_with("+json"),
        _ => false,
    }
}

/// 2^63 as a float (exact).
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// Rewrites every float with an integral value in the `i64` range as an integer.
fn integral_numbers_as_integers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64() {
                // -2^63 <= f < 2^63: exactly the floats that fit an i64.
                if f.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&f) {
                    *value = serde_json::Value::from(f as i64);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_numbers_as_integers),
        serde_json::Value::Object(fields) => {
            fields.values_mut().for_each(integral_numbers_as_integers)
        }
        _ => {}
    }
}

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r {
            JsonRejection::JsonDataError(e) => {
                ApiError::unprocessable(codes::INVALID_BODY, e.body_text())
            }
            JsonRejection::JsonSyntaxError(e) => {
                ApiError::bad_request(codes::MALFORMED_JSON, e.body_text())
            }
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                codes::UNSUPPORTED_MEDIA_TYPE,
                "expected Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(_) => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                codes::PAYLOAD_TOO_LARGE,
                "request body could not be read or is too large",
            ),
            other => ApiError::bad_request(codes::MALFORMED_JSON, other.body_text()),
        }
    }
}

/// `axum::extract::Path` with a 400 `INVALID_PATH` rejection.
#[derive(Debug, Clone, Copy, Default, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::bad_request(codes::INVALID_PATH, r.body_text())
    }
}

/// `axum::extract::Query` with a 400 `INVALID_QUERY` rejection.
#[derive(Debug, Clone, Copy, Default, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::bad_request(codes::INVALID_QUERY, r.body_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::{body::Body, http::Request};

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body1 {
        n: i64,
        list: Vec<i64>,
    }

    async fn read(body: &str) -> Result<Body1, ApiError> {
        let req = Request::builder()
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap();
        Json::<Body1>::from_request(req, &()).await.map(|Json(b)| b)
    }

    #[tokio::test]
    async fn integral_numbers_are_integers_and_fractions_are_refused() {
        let b = read(r#"{"n": 5.0, "list": [1, 2.0, -3e2]}"#).await.unwrap();
        assert_eq!((b.n, b.list), (5, vec![1, 2, -300]));
        let e = read(r#"{"n": 5.5, "list": []}"#).await.unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::UNPROCESSABLE_ENTITY, codes::INVALID_BODY)
        );
        let e = read(r#"{"n": 1e19, "list": []}"#).await.unwrap_err();
        assert_eq!(e.code, codes::INVALID_BODY);
        let e = read(r#"{"n": 1, "list": [], "x": 1}"#).await.unwrap_err();
        assert_eq!(e.code, codes::INVALID_BODY, "unknown fields still refused");
        let e = read("{").await.unwrap_err();
        assert_eq!(e.code, codes::MALFORMED_JSON);
    }

    #[tokio::test]
    async fn only_json_content_types_are_read() {
        for (ct, ok) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("application/problem+json", true),
            ("text/plain", false),
            ("application/jsonx", false),
        ] {
            let req = Request::builder()
                .header("content-type", ct)
                .body(Body::from(r#"{"n": 1, "list": []}"#))
                .unwrap();
            let got = Json::<Body1>::from_request(req, &()).await;
            assert_eq!(got.is_ok(), ok, "{ct}");
            if let Err(e) = got {
                assert_eq!(e.code, codes::UNSUPPORTED_MEDIA_TYPE);
            }
        }
        let req = Request::builder()
            .body(Body::from(r#"{"n": 1, "list": []}"#))
            .unwrap();
        let e = Json::<Body1>::from_request(req, &()).await.unwrap_err();
        assert_eq!(e.code, codes::UNSUPPORTED_MEDIA_TYPE);
    }
}
