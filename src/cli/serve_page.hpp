// The page of `offload-lock serve`: /, /app.js and /style.css.
#ifndef OFFLOAD_LOCK_SRC_CLI_SERVE_PAGE_HPP
#define OFFLOAD_LOCK_SRC_CLI_SERVE_PAGE_HPP

namespace offload_lock::cli {

const char* serve_page_html();
// Reads the board from /events ("board" events: {lock, now, status,
// recentText, historyKept}) and draws it with textContent.
const char* serve_page_script();
const char* serve_page_style();

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_SERVE_PAGE_HPP
