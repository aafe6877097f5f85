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
#[derive(Debug, Clone, Copy, Default, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Json<T>(pub T);

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
