---@mod saipling.config Defaults and the merged options.
local M = {}

---@class saipling.Config
M.defaults = {
  -- Command that starts the language server (stdio). With a virtualenv use e.g.
  -- { "/path/to/venv/bin/python", "-m", "saipling", "serve" }.
  cmd = { "saipling", "serve" },
  -- Extra environment for the server process (API keys, SAIPLING_* variables).
  cmd_env = nil,
  -- The project root is the nearest ancestor directory holding one of these;
  -- without one, the file's own directory is the root.
  root_markers = { ".saipling", ".git", ".context_settings.json" },
  -- Buffers of these filetypes start (or attach to) the server.
  filetypes = { "markdown" },
  -- Sent as `initializationOptions` (SPEC 11 keys, camelCase), e.g.
  -- { provider = "local", quietPeriodSeconds = 30, autoIndex = true }.
  init_options = {},
  -- Answered to `workspace/configuration` (section "saipling"); also merged over
  -- `init_options` at start, so the first index already uses them.
  settings = {},
  -- "auto" picks the first installed of telescope, fzf-lua, snacks, else vim.ui.select.
  picker = "auto", ---@type "auto"|"telescope"|"fzf-lua"|"snacks"|"select"
  -- maxResults sent with :SaiplingSearch and :SaiplingRelated.
  max_results = 20,
  -- Search mode: nil (server default, hybrid), "hybrid", "semantic" or "lexical".
  mode = nil,
  -- Echo indexing `$/progress` in the message area (off if you use fidget/noice).
  progress = true,
  -- Called as on_attach(client, bufnr) when the client attaches to a buffer.
  on_attach = nil,
}

---@type saipling.Config
M.options = vim.deepcopy(M.defaults)

--- Merge user options over the defaults.
---@param opts? table
---@return saipling.Config
function M.setup(opts)
  M.options = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  return M.options
end

return M
