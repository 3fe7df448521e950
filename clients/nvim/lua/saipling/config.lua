---@mod saipling.config Defaults and the merged options.
local M = {}

---@class saipling.Config
M.defaults = {
  -- Command that starts the language server (stdio). With a virtualenv use e.g.
  -- { "/path/to/venv/bin/python", "-m", "saipling", "serve" }.
  cmd = { "saipling", "serve" },
  -- Extra environment for the server process (API keys, SAIPLING_* variables).
  cmd_env = nil,
  -- The project root: the nearest ancestor directory holding the first of these markers found (tried in
  -- this order; your home folder itself never counts), else `root_fallback`.
  root_markers = { ".saipling", "project.json", ".context_settings.json", ".git" },
  -- Without a marker: "cwd" (Neovim's working directory, when the file is under it), "file" (the file's own
  -- folder), false (no root: the server does not start), or function(fname) -> root?.
  root_fallback = "cwd", ---@type "cwd"|"file"|false|fun(fname: string): string?
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
  -- Offered by :SaiplingSearch completion after `type:` (frontmatter `type:` values work too).
  entity_types = {
    "character", "world", "location", "notes", "overview", "brainstorm", "book_overview", "seed", "structure",
    "character_arc", "scene_outline", "scene_draft", "front_matter", "back_matter", "document",
  },
  -- The :SaiplingRelatedWindow split: "right" or "left" (vertical) or "below" (horizontal), and its size.
  related_window = { position = "right", size = 50 },
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
