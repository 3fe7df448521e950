if vim.g.loaded_saipling then
  return
end
vim.g.loaded_saipling = true

local cmd = vim.api.nvim_create_user_command
cmd("SaiplingSearch", function(a) require("saipling").search(a.args, { all_files = a.bang }) end, {
  nargs = "*",
  bang = true,
  desc = "Saipling: search the project (filters: book:ID type:character upto:12 path:notes/; ! = excluded files too)",
  complete = function(arglead) return require("saipling").complete_search(arglead) end,
})
cmd("SaiplingRelated", function(o)
  require("saipling").related(o.range > 0 and { o.line1, o.line2 } or nil, { all_files = o.bang })
end, {
  range = true,
  bang = true,
  desc = "Saipling: passages related to this file (with a range: to the passage there; ! = excluded files too)",
})
cmd("SaiplingRelatedWindow", function() require("saipling.related").toggle() end, {
  desc = "Saipling: toggle a window of passages related to the current file, following it",
})
cmd("SaiplingMentions", function(a) require("saipling").mentions(a.args) end, {
  nargs = "*",
  desc = "Saipling: every mention of a character or place (default: the name under the cursor) in the quickfix list",
})
cmd("SaiplingReindex", function(a) require("saipling").reindex(a.bang) end, { bang = true, desc = "Saipling: reindex (! = full)" })
cmd("SaiplingStatus", function() require("saipling").status() end, { desc = "Saipling: index status" })
cmd("SaiplingClearIndex", function() require("saipling").clear_index() end, { desc = "Saipling: clear the index" })
