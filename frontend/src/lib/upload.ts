/**
 * A multipart upload that reports its progress (fetch cannot: XMLHttpRequest's upload events do). Resolves with the
 * parsed JSON answer; an error answer rejects with the same `ApiError` the typed client throws (422 field messages).
 */
import { ApiError, authHeaders } from "../api/client";

export interface UploadProgress {
  sent: number; // bytes of the request body sent so far
  total: number; // the body's size (0 while unknown)
}

export function uploadWithProgress<T>(url: string, form: FormData, onProgress: (p: UploadProgress) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", url);
    for (const [key, value] of Object.entries(authHeaders())) xhr.setRequestHeader(key, value);
    xhr.upload.onprogress = (e) => onProgress({ sent: e.loaded, total: e.lengthComputable ? e.total : 0 });
    xhr.onerror = () => reject(new Error("the upload failed: the server could not be reached"));
    xhr.onload = () => {
      let body: unknown = null;
      try {
        body = xhr.responseText ? JSON.parse(xhr.responseText) : null;
      } catch {
        body = { detail: xhr.responseText };
      }
      if (xhr.status >= 200 && xhr.status < 300) resolve(body as T);
      else reject(new ApiError(xhr.status, body));
    };
    xhr.send(form);
  });
}

/** "12.3 of 40.0 MB (31%)" */
export function progressText(p: UploadProgress): string {
  const mb = (bytes: number) => (bytes / 1e6).toFixed(1);
  if (!p.total) return `${mb(p.sent)} MB sent`;
  return `${mb(p.sent)} of ${mb(p.total)} MB (${Math.round((100 * p.sent) / p.total)}%)`;
}
